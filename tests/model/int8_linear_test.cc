// int8 weights (model/linear_weight.h, Int8Linear in model/cpu_kernels.h):
// the kernel against a float64 product of the very same dequantized weights
// (so that only the kernel's float32 accumulation differs), for every M of
// the small-row blocks and for many rows, sizes that are not multiples of
// the 16-lane vectors, the 32-input groups or the output blocks; and the
// quantizer's own invariants. tests/parity/int8_parity_test.cc checks the
// quantizer against PyTorch's and a whole model against llama.cpp's Q8_0.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/max.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/attention.h"
#include "model/cpu_kernels.h"
#include "model/cpu_isa.h"
#include "model/cpu_kernels_isa.h"
#include "model/linear_weight.h"

namespace dikkat::model {
namespace {

// As in cpu_kernels_test: float32 sums of n products are within about
// n * 2^-24 * sum|terms| of the exact sum; 1e-5 * sum|terms| still fails on
// any single wrong term at these sizes.
constexpr double kRelativeToMagnitude = 1e-5;

// Where the ISA's int8 kernel takes x as int16 per row and group of 32
// (cpu_kernels_isa.h, quantize_x_int16; and one row where
// Int8OneRowInt16XActive), each input is off by at most half
// its group's step absmax_g / 32767, so an output by at most
// sum over groups g of absmax_g / 65534 * sum_{i in g} |W[o, i]|: that bound
// is allowed on top of the float32 one ([M, out], double; zero elsewhere).
// Computed per group, it fails a kernel that scales x per row (the inputs'
// magnitudes differ by 10^4 between groups, RandomInput).
at::Tensor XRoundingBound(const at::Tensor& xd, const at::Tensor& wd) {
  at::Tensor bound = at::zeros({xd.size(0), wd.size(0)}, xd.options());
  const bool row_int16 = xd.size(0) == 1 && Int8OneRowInt16XActive();
  if (!row_int16 &&
      (kernels::Kernels().quantize_x_int16 == nullptr || xd.size(0) >= Int8GemmMinRows())) {
    return bound;  // x stays float32 (from Int8GemmMinRows() rows: GEMM)
  }
  const int64_t in = xd.size(1);
  for (int64_t i0 = 0; i0 < in; i0 += kInt8GroupSize) {
    const int64_t n = std::min(kInt8GroupSize, in - i0);
    at::Tensor half_step = std::get<0>(xd.narrow(1, i0, n).abs().max(1)) / 65534.0;  // [M]
    bound += half_step.unsqueeze(1) * wd.narrow(1, i0, n).abs().sum(1).unsqueeze(0);
  }
  return bound;
}

// Inputs whose groups of 32 differ in magnitude by 10^4.
at::Tensor RandomInput(int64_t m, int64_t in) {
  at::Tensor group_scale =
      at::pow(10.0, at::arange(in, at::kLong).div(32, "floor").remainder(5).to(at::kDouble) - 2)
          .to(at::kFloat);
  return at::randn({m, in}) * group_scale.unsqueeze(0);
}

struct Shape {
  int64_t in, out;
};
// in: below one vector; 16 (half a group); 37 = 32 + 5 and 53 = 32 + 16 + 5
// (a short last group, masked); multiples of 32; out: not a multiple of any
// block size (3..8) nor of the 24-row task unit.
const Shape kShapes[] = {{5, 7}, {16, 24}, {37, 29}, {53, 40}, {100, 53}, {768, 77}, {200, 131}};

// The largest error beyond `allowed`, relative to the terms' magnitude.
double RelativeError(const at::Tensor& got, const at::Tensor& want, const at::Tensor& magnitude,
                     const at::Tensor& allowed) {
  return (((got.to(at::kDouble) - want).abs() - allowed).clamp_min(0) / (magnitude + 1e-30))
      .max()
      .item<double>();
}

// Weights whose rows differ in magnitude by 10^4, so that a scale applied to
// the wrong row or group shows.
at::Tensor RandomWeights(int64_t out, int64_t in) {
  at::Tensor row_scale =
      at::pow(10.0, at::arange(out, at::kDouble).remainder(5) - 2).to(at::kFloat);
  return at::randn({out, in}) * row_scale.unsqueeze(1);
}

void ExpectMatchesReference(int64_t m, const Shape& s, bool with_bias) {
  const std::string name =
      absl::StrCat("M=", m, " in=", s.in, " out=", s.out, with_bias ? " bias" : " no bias");
  at::Tensor x = RandomInput(m, s.in);
  LinearWeight w = QuantizeInt8(RandomWeights(s.out, s.in));
  at::Tensor b = with_bias ? at::randn({s.out}) : at::Tensor();
  at::Tensor got = Int8Linear(x, w, b);
  ASSERT_EQ(got.scalar_type(), at::kFloat) << name;
  ASSERT_EQ(got.sizes(), at::IntArrayRef({m, s.out})) << name;
  const at::Tensor xd = x.to(at::kDouble), wd = w.Dequantize().to(at::kDouble);
  at::Tensor want = at::matmul(xd, wd.t());
  at::Tensor magnitude = at::matmul(xd.abs(), wd.abs().t());
  if (with_bias) {
    want = want + b.to(at::kDouble);
    magnitude = magnitude + b.to(at::kDouble).abs();
  }
  EXPECT_LT(RelativeError(got, want, magnitude, XRoundingBound(xd, wd)), kRelativeToMagnitude)
      << name;
}

// Puts the int8 kernel overrides back however a test ends.
struct ResetInt8Overrides {
  ~ResetInt8Overrides() {
    SetInt8OneRowInt16X(-1);
    SetInt8OneRowVnni(-1);
    SetInt8Int16Activations(true);
  }
};

TEST(Int8LinearTest, MatchesFloat64ProductOfDequantizedWeightsForEveryRowCountAndOddSize) {
  at::manual_seed(11);
  for (int64_t m = 1; m <= kSmallBatchMaxRows; ++m) {
    for (const Shape& s : kShapes) {
      for (bool with_bias : {false, true}) ExpectMatchesReference(m, s, with_bias);
    }
  }
}

TEST(Int8LinearTest, ManyRowsGoThroughBlocksOfRowsWithATail) {
  at::manual_seed(12);
  // 9 = one block + 1; 32 (a 32-stream decode step); 203 = 25 blocks + 3.
  for (int64_t m : {9, 32, 203}) {
    for (const Shape& s : {Shape{53, 40}, Shape{768, 77}}) ExpectMatchesReference(m, s, true);
  }
}

TEST(Int8LinearTest, RowKernelsAndDequantizedGemmBothMatchTheReference) {
  // Either route at any row count (SetInt8GemmMinRows; by default the ISA
  // picks one by rows, cpu_kernels.h): 96, past AVX2's limit; 257, AVX-512's.
  at::manual_seed(14);
  for (int64_t gemm_from : {1, std::numeric_limits<int32_t>::max()}) {
    SetInt8GemmMinRows(gemm_from);
    for (int64_t m : {13, 96, 257}) {
      for (const Shape& s : {Shape{53, 40}, Shape{768, 77}}) ExpectMatchesReference(m, s, true);
    }
  }
  SetInt8GemmMinRows(0);
}

TEST(Int8LinearTest, EachRowIsComputedAsIfAlone) {
  const ResetInt8Overrides reset;
  // The engine's batching tests compare a sequence's tokens in a batch with
  // its solo run: a row's result must not depend on the other rows. One row
  // alone through the float32-x kernels (SetInt8OneRowInt16X(0)); where the
  // int16-x kernel takes it by default it is held to the reference instead
  // (OneRowWithInt16XOnAvx512MatchesTheReference).
  SetInt8OneRowInt16X(0);
  at::manual_seed(13);
  LinearWeight w = QuantizeInt8(RandomWeights(77, 768));
  at::Tensor x = at::randn({21, 768});
  at::Tensor all = Int8Linear(x, w, at::Tensor());
  for (int64_t m : {0, 7, 8, 20}) {
    EXPECT_TRUE(Int8Linear(x.narrow(0, m, 1), w, at::Tensor()).equal(all.narrow(0, m, 1)))
        << "row " << m;
  }
  SetInt8OneRowInt16X(-1);
}

TEST(Int8LinearTest, RowBlockSizeAndOrderChangeNoBits) {
  // Tile by tile or block after block (SetTiledRowBlocks; the float32-x
  // kernel, AVX-512's), and in the latter any row-block size: the same bits.
  at::manual_seed(29);
  LinearWeight w = QuantizeInt8(RandomWeights(77, 200));
  for (int64_t rows : {7, 8, 16, 21}) {
    at::Tensor x = at::randn({rows, 200});
    SetRowBlockRows(0);
    at::Tensor own = Int8Linear(x, w, at::Tensor());
    for (int tiled : {0, 1}) {
      SetTiledRowBlocks(tiled);
      EXPECT_TRUE(Int8Linear(x, w, at::Tensor()).equal(own)) << rows << " rows, tiled " << tiled;
    }
    SetTiledRowBlocks(0);
    for (int64_t block = 1; block <= 8; ++block) {
      SetRowBlockRows(block);
      EXPECT_TRUE(Int8Linear(x, w, at::Tensor()).equal(own))
          << rows << " rows in blocks of " << block;
    }
    SetRowBlockRows(0);
    SetTiledRowBlocks(-1);
  }
}

TEST(Int8LinearTest, OneRowAsAStreamOrInBlocksGivesTheSameBits) {
  const ResetInt8Overrides reset;
  // One input row on AVX-512 (SetOneRowStreams: by default where the CPU
  // runs 512-bit operations in halves): output rows one after another or
  // interleaved in blocks, the same sums, and the same as the row among
  // others (the engine's batches rely on it). Both are run on every CPU:
  // a full-width CPU would otherwise never run the stream. Elsewhere both
  // modes are the same code. (One row through the float32-x kernels:
  // SetInt8OneRowInt16X(0).)
  SetInt8OneRowInt16X(0);
  at::manual_seed(31);
  for (int64_t out : {77, 2304}) {
    for (int64_t in : {200, 768}) {
      LinearWeight w = QuantizeInt8(RandomWeights(out, in));
      at::Tensor x = at::randn({5, in});
      // Without a bias and with one (added after each row's sum).
      for (const at::Tensor& bias : {at::Tensor(), at::randn({out})}) {
        const at::Tensor all = Int8Linear(x, w, bias);
        for (int streams : {0, 1}) {
          SetOneRowStreams(streams);
          // And each task's rows read as 1, 2, 4 or 8 far-apart streams at
          // once (SetOneRowSpread; 2-3 input rows too where above 1): 77
          // outputs leave parts with a remainder.
          for (int spread : {1, 2, 4, 8}) {
            SetOneRowSpread(spread);
            for (int64_t rows = 1; rows <= 3; ++rows) {
              for (int64_t m = 0; m + rows <= 5; ++m) {
                EXPECT_TRUE(Int8Linear(x.narrow(0, m, rows), w, bias)
                                .equal(all.narrow(0, m, rows)))
                    << "out " << out << " in " << in << ", rows " << m << ".." << m + rows - 1
                    << ", streams " << streams << ", spread " << spread << ", bias "
                    << bias.defined();
              }
            }
          }
          SetOneRowSpread(0);
        }
        SetOneRowStreams(-1);
      }
    }
  }
  SetInt8OneRowInt16X(-1);
}

TEST(Int8LinearTest, PrefetchingIntoL1OrL2GivesTheSameBits) {
  const ResetInt8Overrides reset;
  // SetPrefetchToL2: on Zen 4, by default, 2-3 rows (AVX-512) prefetch W into
  // L2 only, others into L1; every row count either way gives the rows' own
  // sums, on every CPU (one row through the float32-x kernels).
  SetInt8OneRowInt16X(0);
  at::manual_seed(37);
  LinearWeight w = QuantizeInt8(RandomWeights(77, 768));
  at::Tensor x = at::randn({8, 768});
  const at::Tensor all = Int8Linear(x, w, at::Tensor());
  for (int l2 : {0, 1}) {
    SetPrefetchToL2(l2);
    for (int64_t m = 1; m <= 8; ++m) {
      EXPECT_TRUE(Int8Linear(x.narrow(0, 0, m), w, at::Tensor()).equal(all.narrow(0, 0, m)))
          << m << " rows, prefetch to L2 " << l2;
    }
  }
  SetPrefetchToL2(-1);
  SetInt8OneRowInt16X(-1);
}

TEST(Int8LinearTest, NonFiniteInputsGiveNonFiniteOutputsAndLeaveOtherRowsAlone) {
  const ResetInt8Overrides reset;
  // As in a float32 product: a NaN or infinity in x is not rounded away
  // (where x goes to the kernel as int16, its group's scale becomes NaN),
  // in a step of several rows and in one alone, through either one-row
  // kernel (SetInt8OneRowInt16X).
  at::manual_seed(15);
  LinearWeight w = QuantizeInt8(RandomWeights(29, 100));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    at::Tensor x = at::randn({3, 100});
    x[1][70] = bad;
    at::Tensor got = Int8Linear(x, w, at::Tensor());
    EXPECT_FALSE(at::isfinite(got[1]).any().item<bool>()) << bad;
    EXPECT_TRUE(at::isfinite(got[0]).all().item<bool>()) << bad;
    for (int row_int16 : {0, 1}) {
      SetInt8OneRowInt16X(row_int16);
      EXPECT_FALSE(at::isfinite(Int8Linear(x.narrow(0, 1, 1), w, at::Tensor())).any().item<bool>())
          << bad << ", int16 x " << row_int16;
      if (row_int16 == 0) {
        EXPECT_TRUE(got[2].equal(Int8Linear(x.narrow(0, 2, 1), w, at::Tensor())[0])) << bad;
      }
    }
    SetInt8OneRowInt16X(-1);
  }
}

TEST(Int8LinearTest, KeepsLeadingDimensionsAndLinearDispatchesToIt) {
  at::manual_seed(14);
  LinearWeight w = QuantizeInt8(at::randn({24, 64}));
  at::Tensor b = at::randn({24});
  at::Tensor x = at::randn({2, 3, 64});
  at::Tensor got = Linear(x, w, b);
  ASSERT_EQ(got.sizes(), at::IntArrayRef({2, 3, 24}));
  const at::Tensor xd = x.to(at::kDouble), wd = w.Dequantize().to(at::kDouble);
  at::Tensor want = at::matmul(xd, wd.t()) + b.to(at::kDouble);
  at::Tensor allowed = XRoundingBound(xd.reshape({6, 64}), wd).reshape({2, 3, 24}) + 1e-4;
  EXPECT_LE(((got.to(at::kDouble) - want).abs() - allowed).max().item<double>(), 0.0);
}

// One input row with x as int16 and 512-bit integer multiply-adds
// (SetInt8OneRowInt16X(1), SetInt8OneRowVnni(0); on by default on Intel
// CPUs; Zen 4 with AVX512_VNNI takes the VNNI form), wherever AVX-512 is
// active: every odd size of kShapes and GPT-2-small's within the float32 and
// x-rounding bounds of the reference, and not the float32-x kernel's bits
// (so the test sees the int16-x kernel run). Elsewhere (another ISA forced
// or detected) only that the setting turns nothing on.
TEST(Int8LinearTest, OneRowWithInt16XOnAvx512MatchesTheReference) {
  const ResetInt8Overrides reset;
  const bool can = ActiveIsa() == CpuIsa::kAvx512 && kernels::Avx512Int8RowInt16Kernels() != nullptr;
  // By default on Intel's AVX-512 and on Zen 4's with AVX512_VNNI (its VNNI form).
  EXPECT_EQ(Int8OneRowInt16XActive(),
            can && (IntelCpu() ||
                    (Avx512InHalves() && kernels::Avx512VnniInt8RowKernels() != nullptr)));
  EXPECT_EQ(Int8OneRowVnniActive(), can && Avx512InHalves() &&
                                        kernels::Avx512VnniInt8RowKernels() != nullptr);
  SetInt8OneRowVnni(0);  // the multiply-adds below; the VNNI form has its own test
  SetInt8OneRowInt16X(0);
  EXPECT_FALSE(Int8OneRowInt16XActive());
  SetInt8OneRowInt16X(1);
  EXPECT_EQ(Int8OneRowInt16XActive(), can);
  if (!can) {
    SetInt8OneRowInt16X(-1);
    GTEST_SKIP() << "AVX-512 is not the active ISA";
  }
  at::manual_seed(41);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {false, true}) ExpectMatchesReference(1, s, with_bias);
  }
  for (const Shape& s : {Shape{768, 2304}, Shape{3072, 768}}) ExpectMatchesReference(1, s, true);
  LinearWeight w = QuantizeInt8(RandomWeights(77, 768));
  const at::Tensor x = RandomInput(1, 768);
  const at::Tensor int16_x = Int8Linear(x, w, at::Tensor());
  SetInt8OneRowInt16X(0);
  const at::Tensor float_x = Int8Linear(x, w, at::Tensor());
  EXPECT_FALSE(int16_x.equal(float_x)) << "the int16-x kernel ran";
  SetInt8Int16Activations(false);  // float32 x asked for: not the int16-x kernel
  SetInt8OneRowInt16X(1);
  EXPECT_FALSE(Int8OneRowInt16XActive());
  EXPECT_TRUE(Int8Linear(x, w, at::Tensor()).equal(float_x));
  SetInt8Int16Activations(true);
  SetInt8OneRowInt16X(-1);
}

// The AVX512_VNNI form of the one-row int16-x kernel (SetInt8OneRowVnni(1)),
// wherever AVX-512 is active and the CPU has AVX512_VNNI: every odd size of
// kShapes (no whole group, one, an odd number of them, a short last group),
// 33 groups (two chunks of 16 and one left) and GPT-2 small's within the
// float32 and x-rounding bounds of the reference; its groups' integer sums
// are the multiply-add kernel's, so the two agree to float32 rounding (and
// a NaN or infinity in x still reaches the output).
TEST(Int8LinearTest, OneRowWithVnniMatchesTheReferenceAndTheMultiplyAdds) {
  const ResetInt8Overrides reset;
  const bool can = ActiveIsa() == CpuIsa::kAvx512 && kernels::Avx512VnniInt8RowKernels() != nullptr;
  SetInt8OneRowInt16X(1);
  SetInt8OneRowVnni(1);
  EXPECT_EQ(Int8OneRowVnniActive(), can);
  SetInt8OneRowVnni(0);
  EXPECT_FALSE(Int8OneRowVnniActive());
  if (!can) GTEST_SKIP() << "AVX-512 is not the active ISA or the CPU has no AVX512_VNNI";
  SetInt8OneRowVnni(1);
  at::manual_seed(47);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {false, true}) ExpectMatchesReference(1, s, with_bias);
  }
  for (const Shape& s : {Shape{1056, 50}, Shape{768, 2304}, Shape{3072, 768}}) {
    ExpectMatchesReference(1, s, true);
  }
  for (const Shape& s : kShapes) {
    LinearWeight w = QuantizeInt8(RandomWeights(s.out, s.in));
    const at::Tensor x = RandomInput(1, s.in);
    const at::Tensor b = at::randn({s.out});
    SetInt8OneRowVnni(1);
    const at::Tensor vnni = Int8Linear(x, w, b);
    SetInt8OneRowVnni(0);
    const at::Tensor madd = Int8Linear(x, w, b);
    const at::Tensor magnitude =
        at::matmul(x.abs().to(at::kDouble), w.Dequantize().abs().to(at::kDouble).t()) +
        b.abs().to(at::kDouble);
    const double err = ((vnni.to(at::kDouble) - madd.to(at::kDouble)).abs() / magnitude).max()
                           .item<double>();
    EXPECT_LT(err, kRelativeToMagnitude) << "in " << s.in << " out " << s.out;
  }
  {
    // Not the multiply-adds' bits (the float32 sums run in another order),
    // so the test sees the VNNI form run; float32 x asked for turns it off.
    LinearWeight w = QuantizeInt8(RandomWeights(77, 768));
    const at::Tensor x = RandomInput(1, 768);
    SetInt8OneRowVnni(1);
    const at::Tensor vnni = Int8Linear(x, w, at::Tensor());
    SetInt8OneRowVnni(0);
    EXPECT_FALSE(vnni.equal(Int8Linear(x, w, at::Tensor()))) << "the VNNI form ran";
    SetInt8OneRowVnni(1);
    SetInt8Int16Activations(false);
    EXPECT_FALSE(Int8OneRowVnniActive());
    EXPECT_FALSE(Int8OneRowInt16XActive());
    SetInt8Int16Activations(true);
  }
  // 1-8 far-apart streams, prefetches into L1 or L2: the same bits.
  {
    SetInt8OneRowVnni(1);
    LinearWeight w = QuantizeInt8(RandomWeights(203, 1056));
    const at::Tensor x = RandomInput(1, 1056);
    const at::Tensor want = Int8Linear(x, w, at::Tensor());
    for (int streams : {1, 2, 4, 8}) {
      for (int l2 : {0, 1}) {
        SetOneRowSpread(streams);
        SetPrefetchToL2(l2);
        EXPECT_TRUE(Int8Linear(x, w, at::Tensor()).equal(want))
            << streams << " streams, prefetch to L2 " << l2;
      }
    }
    SetOneRowSpread(0);
    SetPrefetchToL2(-1);
  }
  SetInt8OneRowVnni(1);
  LinearWeight w = QuantizeInt8(RandomWeights(29, 100));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (int64_t at_input : {3, 70, 99}) {  // the pair, the odd whole group, the short last one
      at::Tensor x = at::randn({1, 100});
      x[0][at_input] = bad;
      EXPECT_FALSE(at::isfinite(Int8Linear(x, w, at::Tensor())).any().item<bool>())
          << bad << " at " << at_input;
    }
  }
}

// The AVX-512 one-row kernel's x quantizer gives the AVX2 table's bits (the
// scalar QuantizeXInt16): rows with short last groups (5, 16, 37, 48, 53),
// whole groups only (32, 768), an all-zero group (scale 0), a group of
// values too small for 32767 / absmax (rounds to 0) and non-finite groups
// (scale NaN).
TEST(Int8LinearTest, Avx512QuantizerGivesTheScalarQuantizersBits) {
  const kernels::Int8RowInt16Kernels* row = kernels::Avx512Int8RowInt16Kernels();
  if (row == nullptr || !IsaSupported(CpuIsa::kAvx512) || !IsaSupported(CpuIsa::kAvx2)) {
    GTEST_SKIP() << "no AVX-512 on this CPU";
  }
  at::manual_seed(43);
  for (int64_t in : {5, 16, 32, 37, 48, 53, 768}) {
    const int64_t groups = (in + kInt8GroupSize - 1) / kInt8GroupSize;
    at::Tensor x = RandomInput(4, in) * 100;
    x[1].narrow(0, 0, std::min<int64_t>(in, 32)).zero_();
    if (in > 40) x[2][40] = std::numeric_limits<float>::quiet_NaN();
    x[2][in - 1] = -std::numeric_limits<float>::infinity();
    x[3].narrow(0, 0, std::min<int64_t>(in, 32)).mul_(1e-37f);
    std::vector<int16_t> q(4 * in), want_q(4 * in);
    std::vector<float> qs(4 * groups), want_qs(4 * groups);
    row->quantize(x.data_ptr<float>(), q.data(), qs.data(), 4, in, groups);
    kernels::Avx2Kernels().quantize_x_int16(x.data_ptr<float>(), want_q.data(), want_qs.data(), 4,
                                            in, groups);
    EXPECT_EQ(q, want_q) << "in " << in;
    for (int64_t i = 0; i < std::min<int64_t>(in, 32); ++i) {
      EXPECT_EQ(q[3 * in + i], 0) << "in " << in << ": a group of tiny values rounds to 0";
    }
    for (int64_t g = 0; g < 4 * groups; ++g) {
      EXPECT_TRUE(qs[g] == want_qs[g] || (std::isnan(qs[g]) && std::isnan(want_qs[g])))
          << "in " << in << ", group " << g << ": " << qs[g] << " vs " << want_qs[g];
    }
  }
}

TEST(QuantizeInt8Test, SymmetricAbsmaxPerRowAndGroupOf32) {
  at::manual_seed(15);
  at::Tensor w = RandomWeights(9, 70);  // groups of 32, 32 and 6
  w.narrow(0, 4, 1).narrow(1, 32, 32).zero_();
  const LinearWeight q = QuantizeInt8(w);
  ASSERT_TRUE(q.quantized());
  ASSERT_EQ(q.w.scalar_type(), at::kChar);
  ASSERT_EQ(q.scales.sizes(), at::IntArrayRef({9, 3}));
  EXPECT_EQ(q.bytes(), 9 * 70 + 9 * 3 * 4);
  for (int64_t r = 0; r < 9; ++r) {
    for (int64_t g = 0; g < 3; ++g) {
      const int64_t len = g < 2 ? 32 : 6;
      at::Tensor block = w[r].narrow(0, g * 32, len);
      at::Tensor qb = q.w[r].narrow(0, g * 32, len);
      const float scale = q.scales[r][g].item<float>();
      const float absmax = block.abs().max().item<float>();
      if (absmax == 0) {
        EXPECT_EQ(scale, 1.0f);
        EXPECT_EQ(qb.abs().max().item<int>(), 0);
        continue;
      }
      EXPECT_FLOAT_EQ(scale, absmax / 127.0f) << r << "," << g;
      EXPECT_EQ(qb.abs().max().item<int>(), 127) << "the absmax maps to +-127";
      // Round to nearest: every element within half a step of its value.
      const double err =
          (qb.to(at::kDouble) * scale - block.to(at::kDouble)).abs().max().item<double>();
      EXPECT_LE(err, 0.5 * scale * (1 + 1e-6)) << r << "," << g;
    }
  }
}

TEST(QuantizeInt8Test, RowsAndGatherSeeTheSameRowsAsDequantize) {
  at::manual_seed(16);
  const LinearWeight q = QuantizeInt8(at::randn({10, 40}));
  const at::Tensor full = q.Dequantize();
  EXPECT_TRUE(q.Rows(3, 4).Dequantize().equal(full.narrow(0, 3, 4)));
  at::Tensor ids = at::arange(9, -1, -3, at::kLong);  // 9, 6, 3, 0
  EXPECT_TRUE(q.Gather(ids).equal(full.index_select(0, ids)));
  // A row outside the table is an error, not a read past it.
  EXPECT_THROW(q.Gather(at::arange(8, 11, at::kLong)), c10::Error);
  EXPECT_THROW(q.Gather(at::arange(-1, 1, at::kLong)), c10::Error);
}

}  // namespace
}  // namespace dikkat::model
