// SerialAtenOps (model/aten_threads.h) and the layers that use it
// (model/layers.cc): LibTorch's operators on the calling thread alone while a
// guard lives, restored after, other threads untouched; GeluTanh against
// LibTorch's own tanh GELU.
#include "model/aten_threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <thread>

#include "model/layers.h"

namespace dikkat::model {
namespace {

class SerialAtenOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(2); }
  void TearDown() override { SetSerialAtenOps(true); }
};

TEST_F(SerialAtenOpsTest, OneThreadWhileAliveThenTheTeamAgain) {
  ASSERT_EQ(at::get_num_threads(), 2);
  {
    SerialAtenOps serial(true);
    EXPECT_EQ(at::get_num_threads(), 1);
    {
      SerialAtenOps nested(true);
      EXPECT_EQ(at::get_num_threads(), 1);
    }
    EXPECT_EQ(at::get_num_threads(), 1);  // the outer guard still holds
  }
  EXPECT_EQ(at::get_num_threads(), 2);
  {
    SerialAtenOps not_small(false);
    EXPECT_EQ(at::get_num_threads(), 2);
  }
}

TEST_F(SerialAtenOpsTest, OtherThreadsKeepTheTeam) {
  SerialAtenOps serial(true);
  int other = 0;
  std::thread t([&] { other = at::get_num_threads(); });
  t.join();
  EXPECT_EQ(other, 2);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST_F(SerialAtenOpsTest, DisabledForBenchmarks) {
  SetSerialAtenOps(false);
  {
    SerialAtenOps serial(true);
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  SetSerialAtenOps(true);
  SerialAtenOps serial(true);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST_F(SerialAtenOpsTest, OperatorResultsDoNotDependOnIt) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({32, 768}), w = at::randn({768}), b = at::randn({768});
  const at::Tensor team = at::layer_norm(x, {768}, w, b, 1e-5);
  SerialAtenOps serial(true);
  EXPECT_TRUE(at::layer_norm(x, {768}, w, b, 1e-5).equal(team));  // per row: same order
}

// Stated tolerance: 1e-6 absolute against float64 (float32's own rounding of
// values up to ~12 is ~7e-7), for every row count the decode and prefill
// paths see; LibTorch's float32 tanh GELU is held to the same bound.
TEST(GeluTanhTest, MatchesLibTorchsTanhGelu) {
  at::manual_seed(5);
  for (int64_t rows : {1, 7, 64, 300}) {
    const at::Tensor x = at::randn({rows, 3072}) * 4;
    const at::Tensor want = at::gelu(x.to(at::kDouble), "tanh");
    const double ours = (GeluTanh(x).to(at::kDouble) - want).abs().max().item<double>();
    const double theirs = (at::gelu(x, "tanh").to(at::kDouble) - want).abs().max().item<double>();
    EXPECT_LT(ours, 1e-6) << rows;
    EXPECT_LT(theirs, 1e-6) << rows;
    EXPECT_EQ(GeluTanh(x).sizes(), x.sizes());
  }
  // Far tails: 0 below, x above, no NaN from the sigmoid's exp.
  const at::Tensor tails = at::tensor({-1e4f, -80.0f, 80.0f, 1e4f});
  const at::Tensor y = GeluTanh(tails);
  EXPECT_TRUE(at::isfinite(y).all().item<bool>());
  EXPECT_NEAR(y[0].item<float>(), 0.0f, 1e-6);
  EXPECT_NEAR(y[1].item<float>(), 0.0f, 1e-6);
  EXPECT_FLOAT_EQ(y[2].item<float>(), 80.0f);
  EXPECT_FLOAT_EQ(y[3].item<float>(), 1e4f);
}

}  // namespace
}  // namespace dikkat::model
