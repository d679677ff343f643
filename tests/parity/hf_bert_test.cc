// A randomly initialised BERT (hidden 64, 4 heads, 2 layers, ffn 96, 2 token
// types) built in PyTorch from word + position + token-type embeddings, their
// LayerNorm and post-LN nn.TransformerEncoderLayer layers (exact GELU, eps
// 1e-12), saved under BERT's Hugging Face names as BertForMaskedLM
// safetensors (bert. prefix, MLM head, position_ids buffer), BertModel
// pytorch_model.bin (no prefix, pooler) and sharded safetensors. Fixtures:
// make_hf_fixtures.py bert. Tolerance (fp32): 1e-4 of the largest value of the
// last hidden states (parity::MaxRelDiff).
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "model/io/model_folder.h"
#include "tests/parity/hf_parity_util.h"

namespace dikkat::model {
namespace {

constexpr double kHiddenTolerance = 1e-4;

class HfBertTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<parity::HfSuite>> suite = parity::MakeHfSuite("bert");
    if (!suite.ok()) {
      error_ = new std::string(suite.status().ToString());
      return;
    }
    suite_ = suite->release();
  }
  static void TearDownTestSuite() {
    if (suite_ != nullptr) parity::RemoveFixtures(suite_->dir);
    delete suite_;
    delete error_;
    suite_ = nullptr;
    error_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(error_, nullptr) << *error_; }

  static parity::HfSuite* suite_;
  static std::string* error_;
};
parity::HfSuite* HfBertTest::suite_ = nullptr;
std::string* HfBertTest::error_ = nullptr;

TEST_P(HfBertTest, ConfigTranslatesToPostLnEncoder) {
  absl::StatusOr<ModelConfig> config = ReadModelConfig(suite_->Folder(GetParam()));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kEncoderOnly);
  EXPECT_EQ(config->weight_layout, "bert");
  EXPECT_FALSE(config->pre_norm);
  EXPECT_TRUE(config->embedding_norm);
  EXPECT_FALSE(config->final_norm);
  EXPECT_EQ(config->type_vocab_size, 2);
  EXPECT_DOUBLE_EQ(config->norm_eps, 1e-12);
  EXPECT_EQ(config->activation, Activation::kGelu);
  EXPECT_EQ(config->pad_token_id, 0);
  EXPECT_EQ(config->default_pooling, Pooling::kMean);
}

TEST_P(HfBertTest, HiddenStatesMatchPyTorch) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(suite_->Folder(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status();
  // The pooler (and, for BertForMaskedLM, the MLM head) are reported unused.
  for (const std::string& name : m->report.unused_tensors) {
    EXPECT_TRUE(absl::StrContains(name, "pooler.") || absl::StartsWith(name, "cls."))
        << "unexpected unused tensor " << name;
  }
  EXPECT_FALSE(m->report.unused_tensors.empty());
  std::vector<std::vector<int32_t>> ids, types;
  for (int b = 0; b < suite_->sequences(); ++b) {
    ids.push_back(parity::Ids(suite_->Expected("prompt", b)));
    types.push_back(parity::Ids(suite_->Expected("types", b)));
  }
  // Both sequences in one Encode call, each with its sentence A/B type ids.
  std::vector<SequenceChunk> chunks(ids.size());
  for (size_t b = 0; b < ids.size(); ++b) {
    chunks[b].tokens = ids[b];
    chunks[b].type_ids = types[b];
  }
  ForwardOptions options;
  options.hidden_layer = ForwardOptions::kFinalHidden;
  const std::vector<at::Tensor> hidden = m->model->Encode(chunks, options).hidden;
  ASSERT_EQ(hidden.size(), ids.size());
  double worst = 0;
  for (size_t b = 0; b < ids.size(); ++b) {
    worst = std::max(worst, parity::MaxRelDiff(hidden[b], suite_->Expected("hidden", b)));
  }
  parity::ReportError("bert " + GetParam() + " last hidden state", worst);
  EXPECT_LT(worst, kHiddenTolerance);
}

// Token types change the output: without them (all 0) the hidden states
// differ from the reference, so the test above does check type_ids.
TEST_P(HfBertTest, TokenTypesMatter) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(suite_->Folder(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int32_t> ids = parity::Ids(suite_->Expected("prompt", 0));
  SequenceChunk chunk;
  chunk.tokens = ids;
  ForwardOptions options;
  options.hidden_layer = ForwardOptions::kFinalHidden;
  const at::Tensor hidden = m->model->Encode({chunk}, options).hidden[0];
  EXPECT_GT(parity::MaxRelDiff(hidden, suite_->Expected("hidden", 0)), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfBertTest, ::testing::Values("st", "bin", "sharded"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dikkat::model
