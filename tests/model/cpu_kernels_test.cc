// The hand-written CPU kernels (model/cpu_kernels.h) against straightforward
// LibTorch references computed in float64 from the very same (already
// rounded) weights, so that the only difference left is the kernels' float32
// accumulation: every dtype, M = 1..8 rows (one register block) and 9..64
// (several row blocks, the last one partial), and sizes that are not
// multiples of the 16-lane vectors or of the kernels' output blocks; and the
// paged decode attention against a float64 softmax. The suite runs once per
// ISA the machine supports (DIKKAT_ISA, tests/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/cpu_isa.h"
#include "model/cpu_kernels.h"
#include "model/cpu_kernels_isa.h"

namespace dikkat::model {
namespace {

// Float32 sums of n products differ from the exact sum by at most about
// n * 2^-24 * sum|terms| (in practice far less); 1e-5 * sum|terms| is about
// 170 float32 ulps of the sum of magnitudes, and still fails on any wrong
// term (one product is ~1e-3 of that sum or more at the sizes here).
constexpr double kRelativeToMagnitude = 1e-5;

struct Shape {
  int64_t in, out;
};
// in: below one vector, not a multiple of 16 (nor of the 32 of the bfloat16
// kernel: 37 = 32 + 5, 53 = 32 + 16 + 5), exact multiples; out: not a
// multiple of any block size (3..8) nor of the 24-row parallel task unit.
const Shape kShapes[] = {{5, 7}, {16, 24}, {37, 29}, {53, 40}, {100, 53}, {768, 77}, {200, 131}};

// One register block (1..8), then several: 9 = 8 + 1, odd counts whose last
// block is every size 1..7, exact multiples of 8, the largest routed count
// and one more (SmallBatchLinear takes any count).
// Past a pass of kLinearPassRows, with row counts that leave a tail after
// blocks of 6 and 8 and after a pass.
const int64_t kRowCounts[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,   11,  16,  18,  23,
                              29, 31, 32, 37, 45, 48, 55, 63, 64, 129, 256, 301, 512};

std::string Name(c10::ScalarType dtype, int64_t m, const Shape& s, bool bias) {
  return absl::StrCat(c10::toString(dtype), " M=", m, " in=", s.in, " out=", s.out,
                      bias ? " bias" : " no bias");
}

// Max over elements of |got - want| / (sum|x||w| + |b|): the error relative to
// the magnitudes summed, so that the tolerance holds for every size.
double RelativeError(const at::Tensor& got, const at::Tensor& want, const at::Tensor& magnitude) {
  return ((got.to(at::kDouble) - want).abs() / (magnitude + 1e-30)).max().item<double>();
}

// Every float16 bit pattern is widened exactly by the active ISA's kernel
// (F16C, or the generic path's vector operations, which before session 44
// widened one value at a time): W's first column holds all 65536 values
// (subnormals, zeros, infinities and NaN among them), its others zeros, and
// x picks the first column, so each output is one weight times 1 plus zeros
// (which cannot tell -0 from +0, nor one NaN payload from another).
TEST(SmallBatchLinearTest, EveryFloat16ValueIsWidenedExactly) {
  constexpr int64_t kValues = 65536, kIn = 16;
  std::vector<int16_t> bits(kValues * kIn, 0);
  for (int64_t v = 0; v < kValues; ++v) bits[v * kIn] = static_cast<int16_t>(v);
  const at::Tensor w = at::tensor(bits).view({kValues, kIn}).view(at::kHalf);
  at::Tensor x = at::zeros({1, kIn});
  x[0][0] = 1.0f;
  const at::Tensor got = SmallBatchLinear(x, w, at::Tensor()).view({kValues});
  const at::Tensor want = w.select(1, 0).to(at::kFloat);  // LibTorch's widening
  const float* g = got.data_ptr<float>();
  const float* e = want.data_ptr<float>();
  int64_t wrong = 0;
  for (int64_t v = 0; v < kValues; ++v) {
    const bool same = std::isnan(e[v]) ? std::isnan(g[v]) : g[v] == e[v];
    if (!same && ++wrong <= 5) {
      ADD_FAILURE() << "float16 bits 0x" << std::hex << v << std::dec << ": got " << g[v]
                    << ", want " << e[v] << " (" << IsaName(ActiveIsa()) << ")";
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(SmallBatchLinearTest, MatchesFloat64ReferenceForEveryDtypeRowCountAndOddSize) {
  at::manual_seed(7);
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t m : kRowCounts) {
      for (const Shape& s : kShapes) {
        for (bool with_bias : {false, true}) {
          at::Tensor x = at::randn({m, s.in});
          at::Tensor w = at::randn({s.out, s.in}).to(dtype);
          at::Tensor b = with_bias ? at::randn({s.out}) : at::Tensor();
          at::Tensor got = SmallBatchLinear(x, w, b);
          ASSERT_EQ(got.scalar_type(), at::kFloat);
          ASSERT_EQ(got.sizes(), at::IntArrayRef({m, s.out}));
          const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
          at::Tensor want = at::matmul(xd, wd.t());
          at::Tensor magnitude = at::matmul(xd.abs(), wd.abs().t());
          if (with_bias) {
            want = want + b.to(at::kDouble);
            magnitude = magnitude + b.to(at::kDouble).abs();
          }
          EXPECT_LT(RelativeError(got, want, magnitude), kRelativeToMagnitude)
              << Name(dtype, m, s, with_bias);
        }
      }
    }
  }
}

// SmallBatchLinear of m random rows and bfloat16 weights of shape s against a
// float64 product, to kRelativeToMagnitude of the magnitudes summed.
void ExpectBf16LinearMatchesReference(int64_t m, const Shape& s, const std::string& what) {
  at::Tensor x = at::randn({m, s.in});
  at::Tensor w = at::randn({s.out, s.in}).to(at::kBFloat16);
  at::Tensor b = at::randn({s.out});
  at::Tensor got = SmallBatchLinear(x, w, b);
  const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  at::Tensor want = at::matmul(xd, wd.t()) + b.to(at::kDouble);
  at::Tensor magnitude = at::matmul(xd.abs(), wd.abs().t()) + b.to(at::kDouble).abs();
  EXPECT_LT(RelativeError(got, want, magnitude), kRelativeToMagnitude)
      << Name(at::kBFloat16, m, s, true) << what;
}

TEST(SmallBatchLinearTest, Bf16DotProductsAndWideningBothMatchFloat64Reference) {
  // bfloat16 weights at one row (1-4 when forced) take AVX512_BF16's dot
  // product with x in two bfloat16 parts where the CPU has it
  // (cpu_kernels_avx512_bf16.cc), else the widening kernels; the test above
  // sees whichever is active. Here both
  // (where there is only one, twice), held to the same bound: the split
  // keeps x to 2^-17 of |x|, below 1e-5 of the magnitudes summed. Widened
  // both in the far-apart tiles (SpreadTiles: Intel's and AVX2's default) and in the
  // pairs and blocks.
  at::manual_seed(8);
  for (bool dot : {false, true}) {
    SetBf16DotProducts(dot);
    for (int tiles : {0, 1}) {
      if (dot && tiles == 1) continue;  // the dot products take their rows first
      SetSpreadTiles(tiles);
      for (int64_t m : {1, 2, 3, 4, 5}) {
        for (const Shape& s : kShapes) {
          ExpectBf16LinearMatchesReference(
              m, s, dot ? " dot products" : (tiles ? " widened, tiles" : " widened"));
        }
      }
    }
  }
  SetSpreadTiles(-1);
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, Bf16OneRowAsAStreamOrInBlocksBothMatchFloat64Reference) {
  // One input row of bfloat16 weights, widened (dot products off), on
  // AVX-512 either as a stream of output rows or interleaved in blocks
  // (SetOneRowStreams; by default the stream only where 512-bit operations
  // run in halves): both run here on every CPU, held to the same bound (not
  // the far-apart tiles, which take the row on Intel).
  at::manual_seed(12);
  SetBf16DotProducts(0);
  SetSpreadTiles(0);
  for (int streams : {0, 1}) {
    SetOneRowStreams(streams);
    for (const Shape& s : kShapes) {
      ExpectBf16LinearMatchesReference(1, s, streams ? " streams" : " blocks");
    }
  }
  SetOneRowStreams(-1);
  SetSpreadTiles(-1);
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, Bf16DotProductsRunWhereTheCpuHasThemAndKeepNonFiniteInputs) {
  // The ISA matrix runs this suite natively and with DIKKAT_ISA forced lower:
  // the dot products must be on by default exactly where AVX-512 is active,
  // the CPU has AVX512_BF16 and does not split 512-bit operations (Zen 4),
  // and on when asked wherever it has them, or a path would go untested
  // while this passes.
  const bool can = ActiveIsa() == CpuIsa::kAvx512 && kernels::Avx512Bf16DotKernels() != nullptr;
  EXPECT_EQ(Bf16DotProductsActive(), can && !Avx512InHalves());
  SetBf16DotProducts(1);
  EXPECT_EQ(Bf16DotProductsActive(), can);
  SetBf16DotProducts(0);
  EXPECT_FALSE(Bf16DotProductsActive());
  SetBf16DotProducts(1);
  // An infinite or NaN activation stays so (x - hi would be NaN: lo is 0).
  at::Tensor w = at::full({3, 40}, 0.5).to(at::kBFloat16);
  at::Tensor x = at::ones({1, 40});
  x[0][3] = std::numeric_limits<float>::infinity();
  at::Tensor y = SmallBatchLinear(x, w, at::Tensor());
  EXPECT_TRUE(at::isinf(y).all().item<bool>()) << y;
  EXPECT_GT(y.min().item<float>(), 0);
  x[0][3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(at::isnan(SmallBatchLinear(x, w, at::Tensor())).all().item<bool>());
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, Bf16DotProductsTakeOneRowByDefault) {
  // Where they are on by default, the dot products take one input row and
  // 2-4 rows widen (faster there on an Intel Xeon); forced on, they take
  // 1-4. The paths round differently, so bits tell which one ran.
  at::manual_seed(19);
  at::Tensor w = at::randn({77, 768}).to(at::kBFloat16), b = at::randn({77});
  at::Tensor x = at::randn({2, 768}) * 100;
  const auto run = [&](int mode, int64_t rows) {
    SetBf16DotProducts(mode);
    at::Tensor y = SmallBatchLinear(x.narrow(0, 0, rows), w, b);
    SetBf16DotProducts(-1);
    return y;
  };
  const bool dot_by_default = Bf16DotProductsActive();
  for (int64_t rows : {1, 2}) {
    const bool dot = dot_by_default && rows == 1;
    EXPECT_TRUE(run(-1, rows).equal(run(dot ? 1 : 0, rows))) << rows << " rows";
  }
  SetBf16DotProducts(1);
  if (Bf16DotProductsActive()) {
    EXPECT_FALSE(run(1, 2).equal(run(0, 2))) << "forced on, 2 rows take the dot products";
  }
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, Float32RowIsComputedAsIfAlone) {
  // The engine's batching tests compare a sequence's tokens in a batch with
  // its solo run: with float32 weights a row's result must not depend on the
  // other rows, whichever register blocks and output tiles they fall in
  // (21 rows: 5 full blocks of 4 and 1, or 2 of 8 and 5; 77 outputs: no
  // multiple of any tile).
  at::manual_seed(17);
  at::Tensor w = at::randn({77, 768}), b = at::randn({77});
  // 300 rows: a pass of kLinearPassRows and a second one of 44.
  for (int64_t rows : {int64_t{9}, int64_t{21}, int64_t{32}, kLinearPassRows + 44}) {
    at::Tensor x = at::randn({rows, 768});
    at::Tensor all = SmallBatchLinear(x, w, b);
    for (int64_t m : {int64_t{0}, int64_t{4}, int64_t{8}, kLinearPassRows, rows - 1}) {
      if (m >= rows) continue;
      EXPECT_TRUE(SmallBatchLinear(x.narrow(0, m, 1), w, b).equal(all.narrow(0, m, 1)))
          << "row " << m << " of " << rows;
    }
  }
}

TEST(SmallBatchLinearTest, OneRowInFarApartStreamsChangesNoBits) {
  // One to three input rows read as 1, 2, 4 or 8 far-apart streams of
  // W at once (SetOneRowSpread; with SetOneRowStreams on, so that the
  // streaming kernels run on every CPU): each output row keeps its own sum.
  // float32 rows are the rows' sums among others (the batching tests rely
  // on it); bfloat16 (widened) ones in 2-8 streams those of up to 4 rows
  // (LinearBlockBf16Pairs; one stream, LinearRowsBf16Stream, sums in four
  // parts and is held to the float64 reference above instead). 77 and 2304
  // outputs: tasks whose rows split into parts with and without a
  // remainder; 200 and 768 inputs: with and without a tail.
  at::manual_seed(41);
  SetBf16DotProducts(0);
  SetSpreadTiles(0);  // not the far-apart tiles, which Intel's and AVX2's rows take
  SetOneRowStreams(1);
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t out : {77, 2304}) {
      for (int64_t in : {200, 768}) {
        at::Tensor w = at::randn({out, in}).to(dtype), b = at::randn({out});
        at::Tensor x = at::randn({dtype == at::kFloat ? 9 : 4, in});
        const at::Tensor all = SmallBatchLinear(x, w, b);
        for (int streams : {1, 2, 4, 8}) {
          if (dtype == at::kBFloat16 && streams == 1) continue;
          SetOneRowSpread(streams);
          // 2-3 rows too (far apart where streams > 1, else the blocks).
          for (int64_t rows = 1; rows <= 3; ++rows) {
            for (int64_t m = 0; m + rows <= x.size(0); ++m) {
              EXPECT_TRUE(
                  SmallBatchLinear(x.narrow(0, m, rows), w, b).equal(all.narrow(0, m, rows)))
                  << c10::toString(dtype) << " out " << out << " in " << in << ", rows " << m
                  << ".." << m + rows - 1 << ", " << streams << " streams";
            }
          }
        }
        SetOneRowSpread(0);
      }
    }
  }
  SetOneRowStreams(-1);
  SetSpreadTiles(-1);
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, FarApartTilesChangeNoBits) {
  // Float W through the far-apart tiles (SetSpreadTiles(1): every CPU runs
  // them here; by default Intel's at 1-16 rows) gives each output the sum of
  // the row blocks and tiles (SetSpreadTiles(0)): the batching tests rely on
  // a row's sums not depending on the rows beside it. bfloat16 (widened: dot
  // products off) at 1-4 rows sums in pairs or a stream without the tiles,
  // so there the tiles' rows are held to the same rows among 8 instead. Outputs 77 and
  // 2304 (tasks whose rows split into the 4 / 3 parts with and without a
  // remainder), inputs 196, 768 and 780 (with and without a tail on every
  // ISA), 1-9, 13, 16, 32 and 33 rows (one block of input rows, more than
  // one, and up to and past the 8 blocks of 4 whose accumulators the input's
  // parts keep on AVX2), in the ISA's row blocks and in blocks of 4 and 8
  // (SetRowBlockRows); float32's tiles of several row blocks on AVX2 over
  // all of the input at once and in parts of 64 and 192 values (at 196
  // inputs the last part is a tail alone) and the ISA's own (768, over 780
  // inputs) (SetSpreadTileInputPart; the other ISAs and dtypes have no
  // parts and run the same whatever is set).
  at::manual_seed(43);
  SetBf16DotProducts(0);
  const bool tiles = kernels::Kernels().spread_tile_streams > 0;  // not generic
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t out : {77, 2304}) {
      for (int64_t in : {196, 768, 780}) {
        const at::Tensor w = at::randn({out, in}).to(dtype), b = at::randn({out});
        for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 32, 33}) {
          const at::Tensor x = at::randn({rows, in});
          SetSpreadTiles(0);
          at::Tensor expected = SmallBatchLinear(x, w, b);
          if (tiles && dtype == at::kBFloat16 && rows <= 4) {
            const at::Tensor x8 = at::cat({x, at::randn({8 - rows, in})});
            expected = SmallBatchLinear(x8, w, b).narrow(0, 0, rows);
          }
          SetSpreadTiles(1);
          for (int64_t part : {-1, 0, 64, 192}) {
            SetSpreadTileInputPart(part);
            for (int64_t block : {0, 4, 8}) {
              SetRowBlockRows(block);
              EXPECT_TRUE(SmallBatchLinear(x, w, b).equal(expected))
                  << c10::toString(dtype) << " out " << out << " in " << in << ", " << rows
                  << " rows, blocks of " << block << ", input parts of " << part;
            }
          }
          SetSpreadTileInputPart(-1);
          SetRowBlockRows(0);
        }
      }
    }
  }
  SetSpreadTiles(-1);
  SetBf16DotProducts(-1);
}

TEST(SmallBatchLinearTest, FarApartTilesAreTheCpusChoice) {
  // On Intel CPUs and CPUs whose best ISA is AVX2 (measured on both) 1-16
  // rows of float W, not 17; elsewhere none until measured. The kernel tables
  // with it say how many streams.
  const bool cpu = IntelCpu() || DetectedIsa() == CpuIsa::kAvx2;
  for (int64_t rows : {1, 8, 16, 17}) {
    EXPECT_EQ(kernels::SpreadTiles(rows), cpu && rows <= 16) << rows << " rows";
  }
  EXPECT_EQ(kernels::Kernels().spread_tile_streams,
            ActiveIsa() == CpuIsa::kAvx512 ? 4 : (ActiveIsa() == CpuIsa::kAvx2 ? 3 : 0));
  SetSpreadTiles(0);
  EXPECT_FALSE(kernels::SpreadTiles(1));
  SetSpreadTiles(1);
  EXPECT_TRUE(kernels::SpreadTiles(64));
  SetSpreadTiles(-1);
}

TEST(SmallBatchLinearTest, RowBlockSizeAndOrderChangeNoBits) {
  // Each output is the same sum in the same order whatever block of input
  // rows it is computed in and whichever order the blocks run in: tile by
  // tile or block after block (SetTiledRowBlocks), and in the latter the
  // row-block size (SetRowBlockRows, e.g. 8 as 6 + 2 on AVX-512) move no
  // bits, in any dtype; nor does how the blocks of a tile share prefetching
  // (SetTilePrefetchShares) or which cache the prefetches fill (SetPrefetchToL2). (The register blocks differ between the orders,
  // and with them how many sums are reduced at once: Ops::Reduce4.) The
  // far-apart tiles, which take these rows on Intel and AVX2-only CPUs (SpreadTiles), are off
  // here so that these kernels run on every CPU (FarApartTilesChangeNoBits
  // holds the tiles to their sums).
  at::manual_seed(23);
  SetSpreadTiles(0);
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    at::Tensor w = at::randn({77, 200}).to(dtype), b = at::randn({77});
    for (int64_t rows : {5, 7, 8, 13, 16}) {
      at::Tensor x = at::randn({rows, 200});
      SetRowBlockRows(0);
      at::Tensor own = SmallBatchLinear(x, w, b);
      for (int tiled : {0, 1}) {
        SetTiledRowBlocks(tiled);
        EXPECT_TRUE(SmallBatchLinear(x, w, b).equal(own))
            << c10::toString(dtype) << ", " << rows << " rows, tiled " << tiled;
      }
      // Tiled, with each block prefetching all of the next tile's weights.
      SetTilePrefetchShares(0);
      SetTiledRowBlocks(1);
      EXPECT_TRUE(SmallBatchLinear(x, w, b).equal(own))
          << c10::toString(dtype) << ", " << rows << " rows, unshared prefetch";
      SetTilePrefetchShares(-1);
      // Prefetching into L1 or into L2 only, at any number of rows.
      for (int l2 : {0, 1}) {
        SetPrefetchToL2(l2);
        EXPECT_TRUE(SmallBatchLinear(x, w, b).equal(own))
            << c10::toString(dtype) << ", " << rows << " rows, prefetch to L2 " << l2;
      }
      SetPrefetchToL2(-1);
      SetTiledRowBlocks(0);
      for (int64_t block = 1; block <= 8; ++block) {
        SetRowBlockRows(block);
        EXPECT_TRUE(SmallBatchLinear(x, w, b).equal(own))
            << c10::toString(dtype) << ", " << rows << " rows in blocks of " << block;
      }
      SetRowBlockRows(0);
      SetTiledRowBlocks(-1);
    }
  }
  SetSpreadTiles(-1);
}

TEST(SmallBatchLinearTest, AppliesToDecodeRowCountsOfContiguousCpuWeights) {
  at::Tensor w = at::randn({8, 16});
  const SmallBatchLinearLimits active = SmallBatchLinearLimitsFor(ActiveIsa());
  struct Limit {
    c10::ScalarType dtype;
    int64_t from, to;
  };
  const Limit limits[] = {{at::kFloat, active.float32_from, active.float32},
                          {at::kBFloat16, 1, active.bfloat16},
                          {at::kHalf, 1, active.float16}};
  for (const Limit& l : limits) {
    const at::Tensor wd = w.to(l.dtype);
    EXPECT_LE(l.to, 2048) << l.dtype << ": longer prefills stay on GEMM";
    if (l.to >= l.from) {
      EXPECT_TRUE(SmallBatchLinearApplies(at::randn({l.from, 16}), wd)) << l.dtype;
      EXPECT_TRUE(SmallBatchLinearApplies(at::randn({l.to, 16}), wd)) << l.dtype;
    }
    if (l.from > 1) {
      EXPECT_FALSE(SmallBatchLinearApplies(at::randn({l.from - 1, 16}), wd)) << l.dtype;
    }
    EXPECT_FALSE(SmallBatchLinearApplies(at::randn({l.to + 1, 16}), wd)) << l.dtype;
  }
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 16}), at::randn({16, 8}).t()));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 16}), w.to(at::kDouble)));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 3, 16}), w));
}

TEST(SmallBatchLinearTest, RoutingLimitsPerIsa) {
  // With AVX-512 or AVX2 our kernels take every decode row count of every
  // dtype (one register block at least) and float32 row blocks beyond it;
  // the generic ISA float32 at 2-8 rows, and every decode row count of
  // bfloat16 and float16 (the alternative widens W at every call).
  // Both AVX-512 tables (AMD's and Intel's), whichever this CPU takes.
  const std::pair<const char*, SmallBatchLinearLimits> tables[] = {
      {"avx512 (AMD)", kSmallBatchLinearLimitsAvx512},
      {"avx512 (Intel)", kSmallBatchLinearLimitsAvx512Intel},
      {"avx2", SmallBatchLinearLimitsFor(CpuIsa::kAvx2)}};
  for (const auto& [name, l] : tables) {
    EXPECT_EQ(l.float32_from, 1) << name;
    EXPECT_GT(l.float32, kSmallBatchMaxRows) << name;
    EXPECT_GE(l.bfloat16, kSmallBatchMaxRows) << name;
    EXPECT_GE(l.float16, kSmallBatchMaxRows) << name;
    EXPECT_GT(l.int8_gemm_from, kSmallBatchMaxRows) << name;
    EXPECT_LE(l.int8_gemm_from, 513) << name;
  }
  // On Intel the GEMM takes over past 128 rows (measured on a Xeon:
  // cpu_kernels.h); AMD keeps its row blocks to 2048 (Zen 4's measurement).
  const SmallBatchLinearLimits avx512 = SmallBatchLinearLimitsFor(CpuIsa::kAvx512);
  EXPECT_EQ(avx512.float32, IntelCpu() ? 128 : 2048);
  EXPECT_EQ(avx512.float16, IntelCpu() ? 128 : 2048);
  EXPECT_EQ(avx512.bfloat16, 32);
  EXPECT_EQ(avx512.int8_gemm_from, IntelCpu() ? 129 : 257);
  const SmallBatchLinearLimits generic = SmallBatchLinearLimitsFor(CpuIsa::kGeneric);
  EXPECT_EQ(generic.float32_from, 2);
  EXPECT_EQ(generic.float32, kSmallBatchMaxRows);
  EXPECT_GE(generic.bfloat16, kSmallBatchMaxRows);
  EXPECT_GE(generic.float16, kSmallBatchMaxRows);
}

TEST(SmallBatchLinearTest, RowBlocksCanBeSwitchedOffForBenchmarks) {
  if (SmallBatchLinearLimitsFor(ActiveIsa()).float32 <= kSmallBatchMaxRows) {
    GTEST_SKIP() << "float32 row blocks are not routed on " << IsaName(ActiveIsa());
  }
  at::Tensor w = at::randn({8, 16});
  SetSmallBatchLinearRowBlocks(false);
  EXPECT_TRUE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows, 16}), w));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows + 1, 16}), w));
  SetSmallBatchLinearRowBlocks(true);
  EXPECT_TRUE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows + 1, 16}), w));
}

// Reference decode attention in float64 for one sequence: q [Hq, D] against
// keys/values [len, Hkv, D] gathered from the paged cache by its table.
at::Tensor ReferenceDecodeAttention(const at::Tensor& q, const at::Tensor& k_cache,
                                    const at::Tensor& v_cache, const std::vector<int32_t>& table,
                                    int64_t len, int64_t block_size, int64_t window) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
  std::vector<int64_t> slots;
  for (int64_t p = first; p < len; ++p) slots.push_back(table[p / block_size] * block_size + p % block_size);
  at::Tensor idx = at::tensor(slots, at::kLong);
  const int64_t hq = q.size(0), hkv = k_cache.size(1), d = q.size(1);
  at::Tensor k = k_cache.index_select(0, idx).to(at::kDouble);  // [n, Hkv, D]
  at::Tensor v = v_cache.index_select(0, idx).to(at::kDouble);
  k = k.repeat_interleave(hq / hkv, 1).transpose(0, 1);  // [Hq, n, D]
  v = v.repeat_interleave(hq / hkv, 1).transpose(0, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble).unsqueeze(1), k.transpose(1, 2)) /
                      std::sqrt(static_cast<double>(d));  // [Hq, 1, n]
  return at::matmul(at::softmax(scores, -1), v).squeeze(1);  // [Hq, D]
}

TEST(PagedDecodeAttentionTest, MatchesFloat64ReferenceForEveryCacheDtypeHeadLayoutAndWindow) {
  at::manual_seed(21);
  constexpr int64_t kBlock = 4;
  // Head sizes below one vector, not a multiple of 8 or 16, and exact; MHA
  // and grouped-query layouts; windows none, shorter and longer than a
  // sequence.
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t d : {5, 20, 64}) {
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}}) {
        for (int64_t window : {0, 3, 100}) {
          const std::vector<int64_t> lens = {1, 7, 13};
          const int64_t slots = 12 * kBlock;
          at::Tensor k_cache = at::randn({slots, hkv, d}).to(dtype);
          at::Tensor v_cache = at::randn({slots, hkv, d}).to(dtype);
          // Blocks out of order and shared by none: sequence s owns blocks
          // 11 - 4s - j.
          std::vector<std::vector<int32_t>> tables(lens.size());
          for (size_t s = 0; s < lens.size(); ++s) {
            for (int32_t j = 0; j < 4; ++j) tables[s].push_back(11 - 4 * static_cast<int32_t>(s) - j);
          }
          std::vector<const std::vector<int32_t>*> table_ptrs;
          for (const auto& t : tables) table_ptrs.push_back(&t);
          at::Tensor q = at::randn({static_cast<int64_t>(lens.size()), hq, d});
          at::Tensor got =
              PagedDecodeAttention(q, k_cache, v_cache, table_ptrs, lens, kBlock, window);
          ASSERT_EQ(got.sizes(), q.sizes());
          for (size_t s = 0; s < lens.size(); ++s) {
            at::Tensor want = ReferenceDecodeAttention(q[s], k_cache, v_cache, tables[s], lens[s],
                                                       kBlock, window);
            // Outputs are convex combinations of values of magnitude ~1:
            // float32 accumulation over <= 13 keys stays far below 1e-5.
            const double err = (got[s].to(at::kDouble) - want).abs().max().item<double>();
            EXPECT_LT(err, 1e-5) << c10::toString(dtype) << " d=" << d << " hq=" << hq
                                 << " hkv=" << hkv << " window=" << window << " seq " << s;
          }
        }
      }
    }
  }
}

// Reference prompt attention in float64: q [len, Hq, D] at positions
// start.., k and v [total, Hkv, D]; causal with an optional window, or every
// key.
at::Tensor ReferencePromptAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    int64_t start, bool causal, int64_t window) {
  const int64_t len = q.size(0), hq = q.size(1), d = q.size(2), total = k.size(0);
  at::Tensor kd = k.to(at::kDouble).repeat_interleave(hq / k.size(1), 1).transpose(0, 1);
  at::Tensor vd = v.to(at::kDouble).repeat_interleave(hq / k.size(1), 1).transpose(0, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble).transpose(0, 1), kd.transpose(1, 2)) /
                      std::sqrt(static_cast<double>(d));  // [Hq, len, total]
  if (causal) {
    for (int64_t i = 0; i < len; ++i) {
      const int64_t p = start + i;
      const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      if (first > 0) scores.select(1, i).narrow(1, 0, first).fill_(-INFINITY);
      if (p + 1 < total) scores.select(1, i).narrow(1, p + 1, total - p - 1).fill_(-INFINITY);
    }
  }
  return at::matmul(at::softmax(scores, -1), vd).transpose(0, 1).reshape({len, hq * d});
}

TEST(PromptAttentionTest, MatchesFloat64ReferenceForEveryLayoutMaskAndStride) {
  if (!PromptAttentionApplies(at::zeros({1, 1, 16}), at::zeros({1, 1, 16}),
                              at::zeros({1, 1, 16}))) {
    // The generic table leaves prompts to LibTorch (measured faster there).
    EXPECT_EQ(ActiveIsa(), CpuIsa::kGeneric);
    GTEST_SKIP() << "no prompt attention kernel on " << IsaName(ActiveIsa());
  }
  at::manual_seed(22);
  // Head sizes below one vector, not a multiple of 8 or 16, exact, and past
  // one register block of values; MHA and grouped-query; prompts shorter
  // than a block of query rows, a few blocks with a tail, and longer than a
  // block of keys (16-64 keys); from position 0 or after cached keys;
  // windows none, shorter and longer than the keys; and every key visible.
  for (int64_t d : {5, 20, 64, 100}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}}) {
      for (int64_t len : {1, 5, 13, 70}) {
        for (int64_t start : {0, 9}) {
          for (int64_t window : {-1, 0, 3, 100}) {  // -1: not causal
            const bool causal = window >= 0;
            const int64_t total = start + len;
            // Views into wider rows, as the fused QKV projection gives.
            at::Tensor qkv = at::randn({total, 2 * hq + 2 * hkv, d});
            at::Tensor q = qkv.narrow(0, start, len).narrow(1, 0, hq);
            at::Tensor k = qkv.narrow(1, hq, hkv);
            at::Tensor v = qkv.narrow(1, hq + hkv, hkv);
            ASSERT_TRUE(PromptAttentionApplies(q, k, v));
            at::Tensor got = PromptAttention(q, k, v, start, causal, std::max<int64_t>(window, 0));
            at::Tensor want = ReferencePromptAttention(q, k, v, start, causal,
                                                       std::max<int64_t>(window, 0));
            ASSERT_EQ(got.sizes(), want.sizes());
            // Convex combinations of values of magnitude ~1 with weights from
            // float32 scores over d <= 100 products: 1e-5 is ~100 ulps of 1
            // and fails on any wrong weight or value.
            const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
            EXPECT_LT(err, 1e-5) << "d=" << d << " hq=" << hq << " hkv=" << hkv
                                 << " len=" << len << " start=" << start << " window=" << window;
          }
        }
      }
    }
  }
}

TEST(PromptAttentionTest, HeadAfterHeadGivesTheSameBitsAndMatchesFloat64Reference) {
  if (!PromptAttentionApplies(at::zeros({1, 1, 16}), at::zeros({1, 1, 16}),
                              at::zeros({1, 1, 16}))) {
    GTEST_SKIP() << "no prompt attention kernel on " << IsaName(ActiveIsa());
  }
  at::manual_seed(23);
  // Head after head over the values copied per KV head (past 0 keys: every
  // prompt of more than one block of query rows; by default where every KV
  // head's keys and values outgrow L2CacheBytes: some 290-key prompts on a
  // 512 KiB L2, none on 2 MiB) against block after block over the values in place (as
  // before): each output is the same sum either way. 13 or 290 query rows
  // (a tail block) after 0 or 9 cached keys; MHA and grouped-query; windows
  // none, shorter than the keys, and not causal.
  for (int64_t after : {int64_t{0}, int64_t{-1}}) {
    for (int64_t len : {13, 290}) {
      for (int64_t d : {20, 64}) {
        for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}}) {
          for (int64_t start : {0, 9}) {
            for (int64_t window : {-1, 0, 100}) {
              const bool causal = window >= 0;
              const int64_t total = start + len;
              at::Tensor qkv = at::randn({total, 2 * hq + 2 * hkv, d});
              at::Tensor q = qkv.narrow(0, start, len).narrow(1, 0, hq);
              at::Tensor k = qkv.narrow(1, hq, hkv);
              at::Tensor v = qkv.narrow(1, hq + hkv, hkv);
              const int64_t w = std::max<int64_t>(window, 0);
              SetPromptHeadsOuterAfter(after);
              at::Tensor got = PromptAttention(q, k, v, start, causal, w);
              SetPromptHeadsOuterAfter(std::numeric_limits<int64_t>::max());
              at::Tensor before = PromptAttention(q, k, v, start, causal, w);
              SetPromptHeadsOuterAfter(-1);
              const std::string what = absl::StrCat("after=", after, " len=", len, " d=", d,
                                                    " hq=", hq, " hkv=", hkv, " start=", start,
                                                    " window=", window);
              EXPECT_TRUE(got.equal(before)) << what;
              // As in the test above: 1e-5 is ~100 ulps of the values' magnitude.
              const at::Tensor want = ReferencePromptAttention(q, k, v, start, causal, w);
              EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(), 1e-5) << what;
            }
          }
        }
      }
    }
  }
}

TEST(GatherRowsTest, GivesIndexSelectsRowsAndRefusesRowsOutsideTheTable) {
  at::manual_seed(24);
  const at::Tensor ids = at::tensor(std::vector<int64_t>{3, 0, 6, 3, 1});
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong}) {
    const at::Tensor table = (at::randn({7, 37}) * 100).to(dtype);
    const std::string what = c10::toString(dtype);
    // Contiguous (copies per row), a column slice and a transpose (index_select).
    for (const at::Tensor& t : {table, table.narrow(1, 2, 30), table.t().contiguous().t()}) {
      const at::Tensor got = GatherRows(t, ids);
      EXPECT_EQ(got.scalar_type(), dtype) << what;
      EXPECT_TRUE(got.equal(t.index_select(0, ids))) << what;
    }
    EXPECT_TRUE(GatherRows(table, ids.to(at::kInt)).equal(table.index_select(0, ids))) << what;
    EXPECT_EQ(GatherRows(table, at::tensor(std::vector<int64_t>{})).sizes(),
              (std::vector<int64_t>{0, 37}));
    EXPECT_THROW(GatherRows(table, at::tensor(std::vector<int64_t>{1, 7})), c10::IndexError)
        << what;
    EXPECT_THROW(GatherRows(table, at::tensor(std::vector<int64_t>{-1})), c10::IndexError)
        << what;
  }
}

TEST(PromptAttentionTest, RunsOnTheKernelsThatHaveItAndRefusesBadShapes) {
  at::Tensor x = at::randn({4, 2, 16});
  const bool has = kernels::Kernels().prompt_attention != nullptr;
  EXPECT_EQ(has, ActiveIsa() != CpuIsa::kGeneric);
  EXPECT_EQ(PromptAttentionApplies(x, x, x), has);
  // Not float32, heads not contiguous, or heads not a multiple of KV heads.
  EXPECT_FALSE(PromptAttentionApplies(x.to(at::kDouble), x, x));
  EXPECT_FALSE(PromptAttentionApplies(x.transpose(0, 1), x, x));
  EXPECT_FALSE(PromptAttentionApplies(at::randn({4, 3, 16}), x, x));
  SetPromptAttention(false);
  EXPECT_FALSE(PromptAttentionApplies(x, x, x));
  SetPromptAttention(true);
  if (has) {
    // Causal queries past the last key.
    EXPECT_THROW(PromptAttention(x, x.narrow(0, 0, 3), x.narrow(0, 0, 3), 0, true, 0),
                 c10::Error);
  }
}

TEST(PagedDecodeAttentionTest, ASequenceGetsTheSameBitsAloneAndInABatch) {
  // A batch of at least one sequence per thread runs a task per sequence over
  // whole cache rows; one sequence alone runs a task per KV head with
  // prefetch (on more than one thread); SetPagedDecodeAttentionAsBefore a
  // task per head without. The engine's batching relies on a sequence's
  // result not depending on which: every one must give the same bits.
  at::manual_seed(22);
  const int64_t batch = std::max<int64_t>(3, at::get_num_threads());
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t block : {4, 16}) {
      for (int64_t d : {5, 20, 64}) {
        for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}}) {
          for (int64_t window : {0, 9}) {
            const int64_t per_seq = 48 / block;  // 48 positions each
            at::Tensor k_cache = at::randn({batch * per_seq * block, hkv, d}).to(dtype);
            at::Tensor v_cache = at::randn({batch * per_seq * block, hkv, d}).to(dtype);
            std::vector<std::vector<int32_t>> tables(batch);
            std::vector<const std::vector<int32_t>*> table_ptrs;
            std::vector<int64_t> lens;
            for (int64_t s = 0; s < batch; ++s) {
              // Blocks in reverse order; lengths 1, 18, 35, ... (mod 48).
              for (int64_t j = 0; j < per_seq; ++j) {
                tables[s].push_back(static_cast<int32_t>(batch * per_seq - 1 - s * per_seq - j));
              }
              table_ptrs.push_back(&tables[s]);
              lens.push_back(1 + (17 * s) % 48);
            }
            at::Tensor q = at::randn({batch, hq, d});
            const std::string what = std::string(c10::toString(dtype)) + " block=" +
                                     std::to_string(block) + " d=" + std::to_string(d) +
                                     " hq=" + std::to_string(hq) + " window=" +
                                     std::to_string(window);
            at::Tensor together =
                PagedDecodeAttention(q, k_cache, v_cache, table_ptrs, lens, block, window);
            SetPagedDecodeAttentionAsBefore(true);
            at::Tensor before =
                PagedDecodeAttention(q, k_cache, v_cache, table_ptrs, lens, block, window);
            SetPagedDecodeAttentionAsBefore(false);
            EXPECT_TRUE(together.equal(before)) << what;
            for (int64_t s = 0; s < batch; ++s) {
              at::Tensor alone = PagedDecodeAttention(q.narrow(0, s, 1), k_cache, v_cache,
                                                      {table_ptrs[s]}, {lens[s]}, block, window);
              EXPECT_TRUE(alone[0].equal(together[s])) << what << " seq " << s;
            }
          }
        }
      }
    }
  }
}

TEST(CpuIsaTest, NamesRoundTripAndTheActiveIsaIsSupported) {
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    EXPECT_EQ(ParseIsa(IsaName(isa)), isa);
  }
  EXPECT_FALSE(ParseIsa("sse9").has_value());
  EXPECT_TRUE(IsaSupported(CpuIsa::kGeneric));
  EXPECT_TRUE(IsaSupported(DetectedIsa()));
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
}

TEST(CpuIsaTest, VendorAndHalvesAgreeWithProcCpuinfo) {
  // IntelCpu and Avx512InHalves read CPUID's vendor; the kernel says it too.
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  const std::string info((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool intel = info.find("vendor_id\t: GenuineIntel") != std::string::npos;
  const bool amd = info.find("vendor_id\t: AuthenticAMD") != std::string::npos;
  EXPECT_EQ(IntelCpu(), intel);
  if (!amd) {
    EXPECT_FALSE(Avx512InHalves());
  }
  if (Avx512InHalves()) {
    EXPECT_TRUE(IsaSupported(CpuIsa::kAvx512));
  }
}

TEST(CpuIsaTest, DikkatIsaSelectsTheKernelsThisSuiteRuns) {
  // The ISA test matrix (tests/CMakeLists.txt) runs this suite once per ISA
  // the machine supports with DIKKAT_ISA set: make sure the variable took
  // effect, or the matrix would test the same kernels three times.
  const char* env = std::getenv("DIKKAT_ISA");
  if (env == nullptr || *env == '\0') {  // empty: as unset (cpu_isa.cc)
    EXPECT_EQ(ActiveIsa(), DetectedIsa());
    return;
  }
  const std::optional<CpuIsa> wanted = ParseIsa(env);
  ASSERT_TRUE(wanted.has_value()) << env;
  ASSERT_TRUE(IsaSupported(*wanted)) << env << ": the test matrix asked for an ISA this CPU lacks";
  EXPECT_EQ(ActiveIsa(), *wanted);
  EXPECT_NE(DescribeIsa().find(env), std::string::npos) << DescribeIsa();
}

}  // namespace
}  // namespace dikkat::model
