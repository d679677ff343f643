// Llama-family Hugging Face folders against a plain PyTorch reference written
// in make_hf_fixtures.py (RMSNorm, RoPE rotate-half, SwiGLU, GQA):
//   llama    4 query / 2 kv heads, rope_theta 500, linear rope_scaling 2,
//            untied lm_head; model.safetensors, pytorch_model.bin (with
//            rotary_emb.inv_freq buffers) and sharded safetensors without the
//            "model." prefix.
//   mistral  one kv head, head_dim 24 != hidden / heads, sliding window 6.
//   qwen2    q/k/v biases (o_proj none), tied head, {"rope_type": "linear"}.
//   yarn     qwen2 with YaRN's rope_scaling (factor 4 over an original
//            context of 64, theta 100: the ramp spans dims 0-5), as the
//            YaRN paper defines it.
//   phi3     Phi-3's fused qkv_proj and gate_up_proj (split into views at
//            load), GQA 4/2, sliding window 5.
//   qwen3    q_norm / k_norm (RMSNorm over each head of q and k before RoPE),
//            head_dim 24 != hidden / heads, no biases, tied head, layer_types.
//   llama3   Llama 3.1's rope_scaling {"rope_type": "llama3"} (factor 8, an
//            original context of 32: frequencies kept, blended and stretched;
//            the reference follows Meta's published apply_scaling).
// Tolerance (fp32): 1e-4 of the largest logit (parity::MaxRelDiff); 32 greedy tokens (paged KV cache)
// identical.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "model/io/model_folder.h"
#include "tests/parity/hf_parity_util.h"

namespace dikkat::model {
namespace {

constexpr double kLogitTolerance = 1e-4;

using Case = std::pair<std::string, std::string>;  // suite, layout

class HfLlamaTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    suites_ = new std::map<std::string, parity::HfSuite*>();
    for (const char* name : {"llama", "mistral", "qwen2", "llama3", "qwen3", "yarn", "phi3"}) {
      absl::StatusOr<std::unique_ptr<parity::HfSuite>> suite = parity::MakeHfSuite(name);
      if (!suite.ok()) {
        error_ = new std::string(suite.status().ToString());
        return;
      }
      (*suites_)[name] = suite->release();
    }
  }
  static void TearDownTestSuite() {
    for (auto& [name, suite] : *suites_) {
      parity::RemoveFixtures(suite->dir);
      delete suite;
    }
    delete suites_;
    delete error_;
    suites_ = nullptr;
    error_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(error_, nullptr) << *error_; }

  const parity::HfSuite& suite() const { return *suites_->at(GetParam().first); }
  std::string folder() const { return suite().Folder(GetParam().second); }
  std::string label() const { return GetParam().first + " " + GetParam().second; }

  static std::map<std::string, parity::HfSuite*>* suites_;
  static std::string* error_;
};
std::map<std::string, parity::HfSuite*>* HfLlamaTest::suites_ = nullptr;
std::string* HfLlamaTest::error_ = nullptr;

TEST_P(HfLlamaTest, ConfigTranslation) {
  absl::StatusOr<ModelConfig> config = ReadModelConfig(folder());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->weight_layout, GetParam().first == "phi3" ? "phi3" : "llama");
  EXPECT_EQ(config->norm, NormKind::kRmsNorm);
  EXPECT_EQ(config->positions, PositionKind::kRotary);
  EXPECT_EQ(config->activation, Activation::kSwiGlu);
  EXPECT_FALSE(config->mlp_bias);
  const std::string& type = GetParam().first;
  if (type == "llama") {
    EXPECT_EQ(config->kv_heads(), 2);
    EXPECT_DOUBLE_EQ(config->rope_scaling, 2.0);
    EXPECT_DOUBLE_EQ(config->rope_theta, 500.0);
    EXPECT_FALSE(config->tie_embeddings);
  } else if (type == "llama3") {
    EXPECT_DOUBLE_EQ(config->rope_scaling, 1.0);
    EXPECT_DOUBLE_EQ(config->rope_llama3.factor, 8.0);
    EXPECT_DOUBLE_EQ(config->rope_llama3.high_freq_factor, 4.0);
    EXPECT_DOUBLE_EQ(config->rope_llama3.original_max_positions, 32.0);
  } else if (type == "mistral") {
    EXPECT_EQ(config->kv_heads(), 1);
    EXPECT_EQ(config->head_size(), 24);
    EXPECT_EQ(config->sliding_window, 6);
  } else if (type == "phi3") {
    EXPECT_EQ(config->kv_heads(), 2);
    EXPECT_EQ(config->sliding_window, 5);
    EXPECT_FALSE(config->attention_bias);
    EXPECT_FALSE(config->tie_embeddings);
    EXPECT_EQ(config->pad_token_id, 0);
  } else if (type == "yarn") {
    EXPECT_DOUBLE_EQ(config->rope_scaling, 1.0);
    EXPECT_DOUBLE_EQ(config->rope_yarn.factor, 4.0);
    EXPECT_DOUBLE_EQ(config->rope_yarn.original_max_positions, 64.0);
    EXPECT_DOUBLE_EQ(config->rope_yarn.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(config->rope_yarn.beta_slow, 1.0);
    EXPECT_NEAR(YarnAttentionFactor(config->rope_yarn), 0.1 * std::log(4.0) + 1.0, 1e-12);
    EXPECT_EQ(config->max_positions, 256);  // served as vLLM serves it: original x factor
  } else if (type == "qwen3") {
    EXPECT_TRUE(config->qk_norm);
    EXPECT_FALSE(config->qkv_bias_only);
    EXPECT_FALSE(config->attention_bias);
    EXPECT_TRUE(config->tie_embeddings);
    EXPECT_EQ(config->kv_heads(), 2);
    EXPECT_EQ(config->head_size(), 24);
    EXPECT_DOUBLE_EQ(config->rope_theta, 1e6);
    EXPECT_EQ(config->sliding_window, 0);
  } else {
    EXPECT_FALSE(config->qk_norm);
    EXPECT_TRUE(config->qkv_bias_only);
    EXPECT_TRUE(config->tie_embeddings);
    EXPECT_DOUBLE_EQ(config->rope_scaling, 4.0);
    EXPECT_EQ(config->sliding_window, 0);  // use_sliding_window false
  }
}

TEST_P(HfLlamaTest, LogitsMatchReference) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->report.unused_tensors.empty())
      << "unused: " << absl::StrJoin(m->report.unused_tensors, ", ");
  if (GetParam().second == "bin") {
    EXPECT_EQ(m->dropped.size(), 2u) << "the two rotary_emb.inv_freq buffers";
  }
  const double err = parity::MaxPromptLogitError(suite(), *m->model);
  parity::ReportError(label() + " prompt logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

TEST_P(HfLlamaTest, GreedyGenerationWithKvCacheMatchesReference) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder());
  ASSERT_TRUE(m.ok()) << m.status();
  const double err = parity::CheckGreedy(suite(), *m->model);
  parity::ReportError(label() + " cached prefill logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

INSTANTIATE_TEST_SUITE_P(Folders, HfLlamaTest,
                         ::testing::Values(Case{"llama", "st"}, Case{"llama", "bin"},
                                           Case{"llama", "sharded"}, Case{"mistral", "st"},
                                           Case{"qwen2", "st"}, Case{"llama3", "st"},
                                           Case{"qwen3", "st"}, Case{"yarn", "st"},
                                           Case{"phi3", "st"}),
                         [](const auto& info) {
                           return info.param.first + "_" + info.param.second;
                         });

}  // namespace
}  // namespace dikkat::model
