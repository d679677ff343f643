// The hand-written CPU kernels (model/cpu_kernels.h) against straightforward
// LibTorch references computed in float64 from the very same (already
// rounded) weights, so that the only difference left is the kernels' float32
// accumulation: every dtype, M = 1..8 rows (one register block) and 9..64
// (several row blocks, the last one partial), and sizes that are not
// multiples of the 16-lane vectors or of the kernels' output blocks.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/cpu_kernels.h"

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
const int64_t kRowCounts[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  11, 16,
                              18, 23, 29, 31, 32, 37, 45, 48, 55, 63, 64};

std::string Name(c10::ScalarType dtype, int64_t m, const Shape& s, bool bias) {
  return absl::StrCat(c10::toString(dtype), " M=", m, " in=", s.in, " out=", s.out,
                      bias ? " bias" : " no bias");
}

// Max over elements of |got - want| / (sum|x||w| + |b|): the error relative to
// the magnitudes summed, so that the tolerance holds for every size.
double RelativeError(const at::Tensor& got, const at::Tensor& want, const at::Tensor& magnitude) {
  return ((got.to(at::kDouble) - want).abs() / (magnitude + 1e-30)).max().item<double>();
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

TEST(SmallBatchLinearTest, AppliesToDecodeRowCountsOfContiguousCpuWeights) {
  at::Tensor w = at::randn({8, 16});
  const std::pair<c10::ScalarType, int64_t> limits[] = {
      {at::kFloat, kSmallBatchLinearMaxRowsFloat},
      {at::kBFloat16, kSmallBatchLinearMaxRowsBFloat16},
      {at::kHalf, kSmallBatchLinearMaxRowsHalf}};
  for (const auto& [dtype, max_rows] : limits) {
    const at::Tensor wd = w.to(dtype);
    EXPECT_GE(max_rows, kSmallBatchMaxRows) << dtype;
    EXPECT_LT(max_rows, 64) << dtype << ": prefill stays on GEMM";
    EXPECT_TRUE(SmallBatchLinearApplies(at::randn({1, 16}), wd)) << dtype;
    EXPECT_TRUE(SmallBatchLinearApplies(at::randn({max_rows, 16}), wd)) << dtype;
    EXPECT_FALSE(SmallBatchLinearApplies(at::randn({max_rows + 1, 16}), wd)) << dtype;
  }
  EXPECT_GT(kSmallBatchLinearMaxRowsFloat, kSmallBatchMaxRows);
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 16}), at::randn({16, 8}).t()));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 16}), w.to(at::kDouble)));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({2, 3, 16}), w));
}

TEST(SmallBatchLinearTest, RowBlocksCanBeSwitchedOffForBenchmarks) {
  at::Tensor w = at::randn({8, 16});
  SetSmallBatchLinearRowBlocks(false);
  EXPECT_TRUE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows, 16}), w));
  EXPECT_FALSE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows + 1, 16}), w));
  SetSmallBatchLinearRowBlocks(true);
  EXPECT_TRUE(SmallBatchLinearApplies(at::randn({kSmallBatchMaxRows + 1, 16}), w));
}

}  // namespace
}  // namespace dikkat::model
