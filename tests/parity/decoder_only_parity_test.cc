// Decoder-only models against PyTorch references:
//   gpt           nn.TransformerEncoderLayer(norm_first=True, gelu) stack with a
//                 causal mask, learned positions, final LayerNorm, tied head;
//   llama         GQA (4 query / 2 KV heads) + RoPE (rotate-half) + RMSNorm +
//                 SwiGLU, no biases, untied head (plain PyTorch in the script);
//   llama_window  the same with a 6-token sliding window and linear RoPE
//                 scaling 2.
// Each: logits of a prompt (no cache; and the paged cache filled in two
// chunks), then 32 greedy tokens decoded one by one through the cache.
// Tolerance: 1e-4 of the largest logit (parity::MaxRelDiff; fp32); greedy tokens identical.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/attention.h"
#include "model/io/safetensors.h"
#include "model/transformer.h"
#include "tests/parity/parity_util.h"

namespace dikkat::model {
namespace {

using json = nlohmann::json;
constexpr double kLogitTolerance = 1e-4;

struct Case {
  std::string dir;
  json manifest;
};

class DecoderOnlyParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    for (const std::string suite : {"decoder", "llama"}) {
      absl::StatusOr<std::string> dir = parity::MakeFixtures(suite);
      if (!dir.ok()) {
        error_ = new std::string(dir.status().ToString());
        return;
      }
      dirs_->push_back(*dir);
      for (const json& c : json::parse(parity::ReadFile(*dir + "/cases.json"))) {
        (*cases_)[c.at("name")] = Case{*dir + "/" + c.at("name").get<std::string>(), c};
      }
    }
  }
  static void TearDownTestSuite() {
    for (const std::string& dir : *dirs_) parity::RemoveFixtures(dir);
    dirs_->clear();
    cases_->clear();
    delete error_;
    error_ = nullptr;
  }

  void SetUp() override {
    ASSERT_EQ(error_, nullptr) << *error_;
    ASSERT_EQ(cases_->count(GetParam()), 1u) << GetParam();
    case_ = cases_->at(GetParam());
    absl::StatusOr<parity::LoadedModel> m = parity::LoadModelDir(case_.dir);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    absl::StatusOr<TensorMap> expected = ReadSafetensors(case_.dir + "/expected.safetensors");
    ASSERT_TRUE(expected.ok()) << expected.status();
    expected_ = std::move(*expected);
    prompt_ = parity::Ids(expected_.at("prompt"));
  }

  // Logits of the prompt without a cache, and through the paged cache in two
  // chunks, against the reference.
  void CheckPromptLogits(const std::string& label);

  static std::string* error_;
  static std::vector<std::string>* dirs_;
  static std::map<std::string, Case>* cases_;
  Case case_;
  parity::LoadedModel model_;
  TensorMap expected_;
  std::vector<int32_t> prompt_;
};
std::string* DecoderOnlyParityTest::error_ = nullptr;
std::vector<std::string>* DecoderOnlyParityTest::dirs_ = new std::vector<std::string>;
std::map<std::string, Case>* DecoderOnlyParityTest::cases_ = new std::map<std::string, Case>;

TEST_P(DecoderOnlyParityTest, PromptLogitsMatch) {
  EXPECT_TRUE(model_.report.unused_tensors.empty());
  CheckPromptLogits("");
}

// A causal prompt attends in blocks of query rows (kCausalQueryBlockRows,
// 128, from 256 tokens); blocks of 3 rows take that path on these short
// prompts, the last block shorter, the cached second chunk from its offset.
TEST_P(DecoderOnlyParityTest, PromptLogitsMatchInCausalQueryBlocks) {
  ASSERT_GE(prompt_.size(), 8u);
  SetCausalQueryBlockRows(3);
  CheckPromptLogits(".query_blocks_3");
  SetCausalQueryBlockRows(kCausalQueryBlockRows);
}

void DecoderOnlyParityTest::CheckPromptLogits(const std::string& label) {
  SequenceChunk chunk;
  chunk.tokens = prompt_;
  ForwardOptions options;
  options.all_logits = true;
  at::Tensor logits = model_.model->Decode({chunk}, nullptr, options).logits;
  const double err = parity::MaxRelDiff(logits, expected_.at("logits"));
  parity::ReportError(GetParam() + ".prompt_logits" + label, err);
  EXPECT_LE(err, kLogitTolerance);

  // Through the paged cache in two chunks: the second attends to the first
  // one's keys in the cache (and, with a window, only to the last few).
  absl::StatusOr<KvCache> cache = parity::MakeCache(model_.config, 1, /*block_size=*/4);
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::vector<int32_t> table;
  ASSERT_TRUE(cache->allocator().EnsureCapacity(&table, prompt_.size()));
  const size_t split = 5;
  std::vector<at::Tensor> parts;
  for (auto [start, len] : {std::pair<size_t, size_t>{0, split}, {split, prompt_.size() - split}}) {
    SequenceChunk part;
    part.tokens = absl::MakeConstSpan(prompt_).subspan(start, len);
    part.start_pos = static_cast<int64_t>(start);
    part.block_table = &table;
    parts.push_back(model_.model->Decode({part}, &*cache, options).logits);
  }
  cache->allocator().Release(&table);
  const double paged_err = parity::MaxRelDiff(at::cat(parts), expected_.at("logits"));
  parity::ReportError(GetParam() + ".prompt_logits.paged_2_chunks" + label, paged_err);
  EXPECT_LE(paged_err, kLogitTolerance);
}

TEST_P(DecoderOnlyParityTest, GreedyDecodingIsIdentical) {
  const int steps = case_.manifest.at("steps");
  absl::StatusOr<KvCache> cache = parity::MakeCache(model_.config, 1, /*block_size=*/4);
  ASSERT_TRUE(cache.ok()) << cache.status();
  parity::GreedyRun run = parity::GreedyWithCache(*model_.model, &*cache, prompt_, steps);
  EXPECT_EQ(run.tokens, parity::Ids(expected_.at("greedy")));
  const double err = parity::MaxRelDiff(run.step_logits, expected_.at("greedy_logits"));
  parity::ReportError(GetParam() + ".greedy_step_logits", err);
  std::printf("[ parity ] %s greedy: smallest top-2 logit gap in the reference %.3g\n",
              GetParam().c_str(), case_.manifest.at("greedy_min_margin").get<double>());
  EXPECT_LE(err, kLogitTolerance);
  EXPECT_EQ(cache->allocator().num_free(), cache->allocator().num_blocks());
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderOnlyParityTest,
                         ::testing::Values("gpt", "llama", "llama_window"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace dikkat::model
