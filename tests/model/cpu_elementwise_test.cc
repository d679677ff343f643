// The vector norms and activations (model/cpu_elementwise.h) against
// float64 references computed by LibTorch from the same float32 inputs, and
// against LibTorch's float32 operators on special values (NaN, infinities,
// huge magnitudes). Lengths leave every tail 1..15 of a vector and pass the
// size where the work is split over the work team. Runs once per ISA the
// machine supports (DIKKAT_ISA, tests/CMakeLists.txt).
//
// Tolerances, each |ours - ref64| <= rel * |ref64| + 1e-37:
//  * GELU: rel = 1e-6 + 4 * 2^-24 * (1 + v), v the magnitude of the
//    exponent the result is sensitive to (z^2 = x^2 / 2 for erf's e^-z^2,
//    |2u| for tanh's e^-2u): a float32 rounding of an input to e^v is
//    multiplied by v, as in any float32 evaluation. 1e-6 covers the erfc
//    fit (~8e-7) and e^x (~2 ulp).
//  * silu(g) * u: rel 1e-6 + 4 * 2^-24 * (1 + |g|), the same way.
//  * LayerNorm: abs 1e-6 * (|w| * (|n| + (|x| + |mean|) / sd) + |b|), n the
//    normalized value and sd = sqrt(var + eps): float32 roundings of x and
//    of the mean relative to the row's spread. RMSNorm: abs 2e-6 * |w| * |n|.
//    Rows of up to 4099 values.
#include "model/cpu_elementwise.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/erfc.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros_like.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "model/cpu_isa.h"
#include "model/layers.h"

namespace dikkat::model {
namespace {

const int64_t kLengths[] = {1, 7, 15, 16, 17, 31, 33, 100, 3072, 70001};

constexpr double kUlp = 1.0 / (1 << 24);

// max over elements of |got - ref| / (rel * |ref| + 1e-37) (<= 1 passes);
// rel may be a tensor (per element).
double WorstRatio(const at::Tensor& got, const at::Tensor& ref, const at::Tensor& rel) {
  const at::Tensor g = got.to(at::kDouble), r = ref.to(at::kDouble);
  return ((g - r).abs() / (r.abs() * rel + 1e-37)).max().item<double>();
}

// GELU in float64: erf's as x / 2 * erfc(-x / sqrt 2) (LibTorch's float64
// gelu, x / 2 * (1 + erf), loses the far negative tail to cancellation).
at::Tensor Gelu64(const at::Tensor& x, bool tanh) {
  const at::Tensor d = x.to(at::kDouble);
  if (!tanh) return 0.5 * d * at::erfc(-d * M_SQRT1_2);
  const double c = 2.0 * std::sqrt(2.0 / M_PI);
  return d * at::sigmoid(c * (d + 0.044715 * d * d * d));
}

// The relative tolerance of each GELU element (see the top).
at::Tensor GeluTolerance(const at::Tensor& x, bool tanh) {
  const at::Tensor d = x.to(at::kDouble);
  const double c = 2.0 * std::sqrt(2.0 / M_PI);
  const at::Tensor v = tanh ? (c * (d + 0.044715 * d * d * d)).abs() : d * d / 2;
  return 1e-6 + 4 * kUlp * (1 + v);
}

class CpuElementwiseTest : public ::testing::Test {
 protected:
  void SetUp() override { SetCpuElementwise(true); }
  void TearDown() override { SetCpuElementwise(true); }
};

TEST_F(CpuElementwiseTest, AppliesToContiguousFloat32CpuTensorsOnly) {
  const at::Tensor x = at::randn({4, 8});
  EXPECT_TRUE(CpuElementwiseApplies(x));
  EXPECT_TRUE(CpuElementwiseApplies(x, {at::Tensor(), at::randn({8})}));
  EXPECT_FALSE(CpuElementwiseApplies(x.to(at::kDouble)));
  EXPECT_FALSE(CpuElementwiseApplies(x.t()));
  EXPECT_FALSE(CpuElementwiseApplies(x, {at::randn({8}).to(at::kBFloat16)}));
  SetCpuElementwise(false);
  EXPECT_FALSE(CpuElementwiseApplies(x));
}

TEST_F(CpuElementwiseTest, ResidualAddIsInPlaceOnlyIntoStorageNothingElseShares) {
  // A decode step's row and a prefill's rows (split over the work team).
  for (int64_t rows : {int64_t{1}, int64_t{600}}) {
    const at::Tensor x = at::randn({rows, 768});
    const at::Tensor x_before = x.clone();
    at::Tensor s = at::randn({rows, 768});
    const at::Tensor want = x + s;  // LibTorch's operator: the bits to match
    const void* sp = s.data_ptr();
    at::Tensor got = CpuResidualAdd(x, std::move(s));
    EXPECT_TRUE(got.equal(want)) << rows;
    EXPECT_EQ(got.data_ptr(), sp) << rows << ": a fresh sublayer output is added to in place";
    EXPECT_TRUE(x.equal(x_before));
  }
  const at::Tensor x = at::randn({3, 64});
  // s shared with another tensor (a view of it, or x itself), another dtype,
  // another shape, or the kernels turned off: LibTorch's x + s, nothing
  // changed in place.
  const at::Tensor base = at::randn({3, 64});
  const at::Tensor base_before = base.clone();
  at::Tensor got = CpuResidualAdd(x, base.view({3, 64}));
  EXPECT_TRUE(got.equal(x + base_before));
  EXPECT_TRUE(base.equal(base_before));
  const at::Tensor x_before = x.clone();
  EXPECT_TRUE(CpuResidualAdd(x, x).equal(x_before + x_before));
  EXPECT_TRUE(x.equal(x_before));
  EXPECT_TRUE(CpuResidualAdd(x, at::randn({1, 64})).sizes() == x.sizes());  // broadcast
  const at::Tensor d = at::randn({3, 64}, at::kDouble);
  EXPECT_EQ(CpuResidualAdd(x, d.clone()).scalar_type(), at::kDouble);
  SetCpuElementwise(false);
  at::Tensor s = at::randn({3, 64});
  const void* sp = s.data_ptr();
  EXPECT_NE(CpuResidualAdd(x, std::move(s)).data_ptr(), sp);
}

TEST_F(CpuElementwiseTest, GeluMatchesFloat64Reference) {
  for (bool tanh : {false, true}) {
    for (int64_t n : kLengths) {
      const at::Tensor x = at::randn({n}) * 3.0;
      EXPECT_LE(WorstRatio(CpuGelu(x, tanh), Gelu64(x, tanh), GeluTolerance(x, tanh)), 1.0)
          << (tanh ? "tanh" : "erf") << " n=" << n << " on " << IsaName(ActiveIsa());
    }
    // A dense sweep, out to where the result is no longer a normal float.
    const at::Tensor sweep = at::linspace(-13.0, 13.0, 260001);
    EXPECT_LE(WorstRatio(CpuGelu(sweep, tanh), Gelu64(sweep, tanh), GeluTolerance(sweep, tanh)),
              1.0)
        << (tanh ? "tanh" : "erf");
  }
}

TEST_F(CpuElementwiseTest, GeluSpecialValuesAsLibTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {0.0f,   -0.0f,   nan,      inf,    -inf,    1e30f,
                                -1e30f, 100.0f,  -100.0f,  1e-30f, -1e-30f, 88.0f,
                                -88.0f, 3.0e38f, -3.0e38f, 5.0f,   -5.0f};
  const at::Tensor x = at::tensor(v);
  for (bool tanh : {false, true}) {
    // NaN and infinities where LibTorch's float32 operator has them; finite
    // values as the float64 reference (LibTorch's float32 erf GELU loses
    // the negative tail: -1.49e-6 at x = -5 for -1.4333e-6).
    const at::Tensor ours = CpuGelu(x, tanh);
    const at::Tensor ref32 = tanh ? GeluTanh(x) : at::gelu(x);
    const at::Tensor ref64 = Gelu64(x, tanh), tol = GeluTolerance(x, tanh);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float a = ours[i].item<float>(), b = ref32[i].item<float>();
      const double r = ref64[i].item<double>();
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << "x=" << v[i] << (tanh ? " tanh" : " erf");
      } else if (std::isinf(b)) {
        EXPECT_EQ(a, b) << "x=" << v[i] << (tanh ? " tanh" : " erf");
      } else {
        EXPECT_NEAR(a, r, tol[i].item<double>() * std::fabs(r) + 1e-37)
            << "x=" << v[i] << (tanh ? " tanh" : " erf");
      }
    }
  }
}

TEST_F(CpuElementwiseTest, ExpShiftedMatchesFloat64Reference) {
  // e^((x - 3) / 0.7) over the range where it is a normal float, and the
  // edges: 0 below it (and for -inf), infinity above, NaN kept.
  const at::Tensor x = at::linspace(-57.0, 65.0, 100003);
  at::Tensor y = at::empty_like(x);
  CpuExpShifted(x.data_ptr<float>(), 3.0f, 0.7f, y.data_ptr<float>(), x.numel());
  const at::Tensor v = (x.to(at::kDouble) - 3.0) / 0.7;
  const at::Tensor rel = 1e-6 + 4 * kUlp * (1 + v.abs());
  EXPECT_LE(WorstRatio(y, v.exp(), rel), 1.0);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {-inf, -1000.0f, -87.5f, 89.0f, inf,
                                    std::numeric_limits<float>::quiet_NaN(), 0.0f};
  std::vector<float> out(edges.size());
  CpuExpShifted(edges.data(), 0.0f, 1.0f, out.data(), static_cast<int64_t>(edges.size()));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], inf);
  EXPECT_EQ(out[4], inf);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(out[6], 1.0f);
}

// The sum CpuExpShifted returns, with and without storing the values,
// against float64's sum of float64's exponentials: within 2e-6 relative at
// every length around the vector widths and the 256-value runs.
TEST_F(CpuElementwiseTest, ExpShiftedSumMatchesFloat64Reference) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {1, 7, 15, 16, 17, 255, 256, 257, 1000, 50257}) {
    std::vector<float> x(n), y(n);
    for (float& v : x) v = normal(gen);
    const float max = *std::max_element(x.begin(), x.end());
    const double with_values = CpuExpShifted(x.data(), max, 0.8f, y.data(), n);
    const double sum_only = CpuExpShifted(x.data(), max, 0.8f, nullptr, n);
    double reference = 0.0, stored = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      reference += std::exp((static_cast<double>(x[i]) - max) / 0.8);
      stored += y[i];
    }
    EXPECT_EQ(with_values, sum_only) << n;
    EXPECT_NEAR(with_values, reference, 2e-6 * reference) << n;
    EXPECT_NEAR(stored, reference, 2e-6 * reference) << n;
  }
}

// CpuMaxChecked: the largest value, -inf a legitimate mask, NaN and +inf
// flagged wherever they are (in a vector or in the tail).
TEST_F(CpuElementwiseTest, MaxCheckedFindsTheMaxAndFlagsNanAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 5, 16, 17, 40, 50257}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = -static_cast<float>((i * 7919) % 1000) - 0.5f;
    x[n / 2] = 12.25f;
    bool bad = true;
    EXPECT_EQ(CpuMaxChecked(x.data(), n, &bad), 12.25f) << n;
    EXPECT_FALSE(bad) << n;
    for (int64_t i = 0; i < n; i += 2) x[i] = -inf;  // masks
    x[n / 2] = 12.25f;
    EXPECT_EQ(CpuMaxChecked(x.data(), n, &bad), 12.25f) << n;
    EXPECT_FALSE(bad) << n;
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      for (float poison : {nan, inf}) {
        std::vector<float> p = x;
        p[at] = poison;
        bad = false;
        CpuMaxChecked(p.data(), n, &bad);
        EXPECT_TRUE(bad) << n << " at " << at << " " << poison;
      }
    }
    std::vector<float> masked(n, -inf);
    EXPECT_EQ(CpuMaxChecked(masked.data(), n, &bad), -inf) << n;
    EXPECT_FALSE(bad) << n;
  }
}

TEST_F(CpuElementwiseTest, SiluMulMatchesFloat64Reference) {
  for (int64_t n : kLengths) {
    const at::Tensor g = at::randn({n}) * 4.0, u = at::randn({n});
    const at::Tensor ref = at::silu(g.to(at::kDouble)) * u.to(at::kDouble);
    const at::Tensor rel = 1e-6 + 4 * kUlp * (1 + g.to(at::kDouble).abs());
    EXPECT_LE(WorstRatio(CpuSiluMul(g, u), ref, rel), 1.0) << "n=" << n;
  }
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor g = at::tensor(std::vector<float>{-inf, inf, -200.0f, 200.0f, 0.0f});
  const at::Tensor u = at::tensor(std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  const at::Tensor ours = CpuSiluMul(g, u), ref = at::silu(g) * u;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const float a = ours[i].item<float>(), b = ref[i].item<float>();
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << i;
    } else {
      EXPECT_EQ(a, b) << i;
    }
  }
}

TEST_F(CpuElementwiseTest, LayerNormAndRmsNormMatchFloat64Reference) {
  for (int64_t d : {1, 5, 16, 17, 64, 768, 4099}) {
    for (int64_t rows : {1, 3, 40}) {
      // An offset, so that the mean matters (and a second pass over the row).
      const at::Tensor x = at::randn({rows, d}) * 2.0 + 3.0;
      const at::Tensor w = at::randn({d}), b = at::randn({d});
      const at::Tensor x64 = x.to(at::kDouble), w64 = w.to(at::kDouble), b64 = b.to(at::kDouble);
      // LayerNorm in float64 by its definition (LibTorch's float64
      // layer_norm is off by ~1e-13 for one-element rows).
      const at::Tensor mean = x64.mean(-1, true);
      const at::Tensor sd = ((x64 - mean).pow(2).mean(-1, true) + 1e-5).sqrt();
      const at::Tensor normalized = (x64 - mean) / sd;
      for (bool with_bias : {true, false}) {
        const at::Tensor bias = with_bias ? b : at::Tensor();
        const at::Tensor ref = with_bias ? normalized * w64 + b64 : normalized * w64;
        // float32 roundings of x and of the mean, relative to the spread.
        const at::Tensor bound =
            1e-6 * (w64.abs() * (normalized.abs() + (x64.abs() + mean.abs()) / sd) +
                    (with_bias ? b64.abs() : at::zeros_like(w64))) +
            1e-30;
        const at::Tensor err = (CpuNorm(x, w, bias, 1e-5, false).to(at::kDouble) - ref).abs();
        EXPECT_TRUE((err <= bound).all().item<bool>())
            << "LayerNorm d=" << d << " rows=" << rows << " worst "
            << (err / bound).max().item<double>();
      }
      const at::Tensor rms_normalized = x64 * at::rsqrt((x64 * x64).mean(-1, true) + 1e-6);
      const at::Tensor ref = rms_normalized * w64;
      const at::Tensor err = (CpuNorm(x, w, at::Tensor(), 1e-6, true).to(at::kDouble) - ref).abs();
      const at::Tensor bound = 2e-6 * (rms_normalized.abs() * w64.abs()) + 1e-30;
      EXPECT_TRUE((err <= bound).all().item<bool>())
          << "RMSNorm d=" << d << " rows=" << rows << " worst "
          << (err / bound).max().item<double>();
    }
  }
}

TEST_F(CpuElementwiseTest, NormLayerTakesTheKernelsAndAgreesWithLibTorch) {
  // Norm (layers.h) on float32 CPU rows goes to CpuNorm; off, to LibTorch.
  Norm norm;
  norm.weight = at::randn({96});
  norm.bias = at::randn({96});
  const at::Tensor x = at::randn({5, 96});
  const at::Tensor ours = norm(x);
  SetCpuElementwise(false);
  const at::Tensor theirs = norm(x);
  EXPECT_TRUE(at::allclose(ours, theirs, 1e-5, 1e-5));
  norm.kind = NormKind::kRmsNorm;
  norm.bias = at::Tensor();
  const at::Tensor theirs_rms = norm(x);
  SetCpuElementwise(true);
  EXPECT_TRUE(at::allclose(norm(x), theirs_rms, 1e-5, 1e-5));
}

TEST_F(CpuElementwiseTest, RejectsMismatchedShapes) {
  EXPECT_THROW(CpuSiluMul(at::randn({4}), at::randn({5})), c10::Error);
  EXPECT_THROW(CpuNorm(at::randn({2, 8}), at::randn({7}), at::Tensor(), 1e-5, false), c10::Error);
}

}  // namespace
}  // namespace dikkat::model
