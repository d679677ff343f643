// int8 weights (--dtype int8) against PyTorch and llama.cpp's Q8_0
// (make_parity_fixtures.py int8):
//   * QuantizeInt8 gives exactly torch.quantize_per_channel(...).int_repr()
//     with each (row, group of 32 inputs) as a channel, and the same scales;
//   * on the shipped models/dikkat-lm (trained, tied embeddings / LM head),
//     int8 logits stay close to float32 ones and greedy tokens agree, and
//     the error is no larger than that of the same weights quantized the way
//     llama.cpp's Q8_0 does (computed in Python): "equal accuracy".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/sum.h>
#include <gtest/gtest.h>

#include "model/io/safetensors.h"
#include "model/linear_weight.h"
#include "model/model_loader.h"
#include "model/transformer.h"
#include "tests/parity/parity_util.h"

namespace dikkat::model {
namespace {

const std::string kModel = std::string(DIKKAT_SOURCE_DIR) + "/models/dikkat-lm";

constexpr char kInt8Suite[] = "int8";
using Int8ParityTest = parity::FixtureSuite<kInt8Suite>;

TEST_F(Int8ParityTest, QuantizerMatchesTorchQuantizePerChannel) {
  absl::StatusOr<TensorMap> cases = ReadSafetensors(Dir() + "/quantizer.safetensors");
  ASSERT_TRUE(cases.ok()) << cases.status();
  for (const std::string name : {"odd", "wide"}) {
    const LinearWeight q = QuantizeInt8(cases->at(name + ".w"));
    const at::Tensor want_q = cases->at(name + ".q"), want_scales = cases->at(name + ".scales");
    ASSERT_EQ(q.w.sizes(), want_q.sizes()) << name;
    ASSERT_EQ(q.scales.sizes(), want_scales.sizes()) << name;
    EXPECT_EQ(q.w.ne(want_q).sum().item<int64_t>(), 0) << name << ": int8 values differ";
    EXPECT_TRUE(q.scales.equal(want_scales)) << name << ": scales differ";
  }
}

// Logits of every position of a 64-token prompt (no cache).
at::Tensor PromptLogits(const Transformer& model, const std::vector<int32_t>& prompt) {
  SequenceChunk chunk;
  chunk.tokens = prompt;
  ForwardOptions options;
  options.all_logits = true;
  return model.Decode({chunk}, nullptr, options).logits;  // [T, V]
}

double Rms(const at::Tensor& t) {
  return std::sqrt(t.to(at::kDouble).pow(2).mean().item<double>());
}

TEST_F(Int8ParityTest, ModelLogitsCloseToFloat32AndNoWorseThanQ8_0) {
  absl::StatusOr<parity::LoadedModel> fp32 = parity::LoadModelDir(kModel);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  absl::StatusOr<parity::LoadedModel> int8 = parity::LoadModelDir(kModel, at::kChar);
  ASSERT_TRUE(int8.ok()) << int8.status();
  absl::StatusOr<parity::LoadedModel> q8_0 = parity::LoadModelDir(Dir() + "/q8_0");
  ASSERT_TRUE(q8_0.ok()) << q8_0.status();
  // int8 matrices take a quarter of the bytes (+ one float32 scale per 32).
  EXPECT_LT(int8->report.parameter_bytes, fp32->report.parameter_bytes * 0.32);

  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 64; ++i) prompt.push_back((i * 977 + 13) % 4096);
  const at::Tensor want = PromptLogits(*fp32->model, prompt);
  const at::Tensor ours = PromptLogits(*int8->model, prompt) - want;
  const at::Tensor theirs = PromptLogits(*q8_0->model, prompt) - want;
  const double ours_max = ours.abs().max().item<double>(), ours_rms = Rms(ours);
  const double q8_max = theirs.abs().max().item<double>(), q8_rms = Rms(theirs);
  std::printf(
      "[ int8 ] logits rms %.4g (%.4g of float32's) vs float32: int8 max %.4g rms %.4g, "
      "Q8_0 max %.4g rms %.4g\n",
      Rms(want), ours_rms / Rms(want), ours_max, ours_rms, q8_max, q8_rms);
  parity::ReportError("int8 vs float32 logits", ours_max, "max abs err");
  parity::ReportError("Q8_0 vs float32 logits", q8_max, "max abs err");
  // Stated tolerance: the logits (rms ~4 here) move by at most 0.25 and by
  // 1% of their rms on average.
  EXPECT_LT(ours_max, 0.25);
  EXPECT_LT(ours_rms, 0.01 * Rms(want));
  // Equal accuracy: our float32 scales are Q8_0's float16 ones unrounded, so
  // the error is Q8_0's or less; 5% slack for the sum of random roundings.
  EXPECT_LE(ours_rms, 1.05 * q8_rms);
  EXPECT_LE(ours_max, 1.05 * q8_max);
  // Next-token choices over the prompt: mostly the same.
  const double agree = want.argmax(-1)
                           .eq(PromptLogits(*int8->model, prompt).argmax(-1))
                           .to(at::kDouble)
                           .mean()
                           .item<double>();
  EXPECT_GE(agree, 0.95);
}

TEST_F(Int8ParityTest, WeightErrorNoLargerThanQ8_0) {
  absl::StatusOr<TensorMap> original = ReadWeights(kModel + "/model.safetensors");
  ASSERT_TRUE(original.ok()) << original.status();
  absl::StatusOr<TensorMap> q8_0 = ReadWeights(Dir() + "/q8_0/model.safetensors");
  ASSERT_TRUE(q8_0.ok()) << q8_0.status();
  double ours = 0, theirs = 0;
  int matrices = 0;
  for (const auto& [name, w] : *original) {
    if (w.dim() != 2 || name.find("embed_positions") != std::string::npos) continue;
    const at::Tensor wf = w.to(at::kFloat);
    ours += (QuantizeInt8(wf).Dequantize() - wf).to(at::kDouble).pow(2).sum().item<double>();
    theirs += (q8_0->at(name).to(at::kFloat) - wf).to(at::kDouble).pow(2).sum().item<double>();
    ++matrices;
  }
  std::printf("[ int8 ] %d matrices: squared weight error int8 %.6g, Q8_0 %.6g\n", matrices, ours,
              theirs);
  EXPECT_GE(matrices, 4 * 4 + 1);  // 4 per layer + the tied embedding
  EXPECT_LE(ours, theirs);
}

TEST_F(Int8ParityTest, GreedyDecodingThroughTheCacheMostlyAgrees) {
  absl::StatusOr<parity::LoadedModel> fp32 = parity::LoadModelDir(kModel);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  absl::StatusOr<parity::LoadedModel> int8 = parity::LoadModelDir(kModel, at::kChar);
  ASSERT_TRUE(int8.ok()) << int8.status();
  absl::StatusOr<KvCache> cache_a = parity::MakeCache(fp32->config, 1);
  absl::StatusOr<KvCache> cache_b = parity::MakeCache(int8->config, 1, 4, CacheDType(at::kChar));
  ASSERT_TRUE(cache_a.ok() && cache_b.ok());
  int same = 0, total = 0;
  for (int32_t start : {5, 700, 1500, 3000}) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 12; ++i) prompt.push_back((start + i * 131) % 4096);
    const parity::GreedyRun a = parity::GreedyWithCache(*fp32->model, &*cache_a, prompt, 24);
    const parity::GreedyRun b = parity::GreedyWithCache(*int8->model, &*cache_b, prompt, 24);
    // Count the tokens before the first difference: after one, the two runs
    // continue different texts.
    size_t n = 0;
    while (n < a.tokens.size() && a.tokens[n] == b.tokens[n]) ++n;
    same += static_cast<int>(n);
    total += static_cast<int>(a.tokens.size());
  }
  std::printf("[ int8 ] greedy: %d of %d tokens before the first difference\n", same, total);
  EXPECT_GE(same, total * 3 / 4);
}

TEST_F(Int8ParityTest, RefusedOffTheCpu) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfigJson(parity::ReadFile(kModel + "/dikkat.json"));
  ASSERT_TRUE(config.ok());
  LoadOptions options;
  options.dtype = at::kChar;
  options.device = c10::Device(c10::DeviceType::Meta);
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Load(*config, TensorMap(), options, nullptr);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("CPU only"), std::string::npos) << model.status();
}

}  // namespace
}  // namespace dikkat::model
