// Gemma 3's text model (model_type gemma3_text) against the plain PyTorch
// reference written in make_hf_fixtures.py (Gemma3Reference): (1 + w)
// RMSNorms before and after each sublayer, q_norm / k_norm, GeGLU with the
// tanh GELU, tokens times sqrt(hidden), scores times
// query_pre_attn_scalar^-1/2 (24, head_dim 32), two local layers (window 4,
// RoPE base 100, no scaling) and a global one (base 10000, linear scaling
// 2), tied head.
//   st     transformers 4.50's config (sliding_window_pattern 3).
//   typed  the same model with 4.53's layer_types and no "model." prefix.
//   mm     the multimodal Gemma 3 (model_type gemma3, 4B and up): the text
//          model under text_config and language_model.model., an image
//          encoder beside it (not used: dikkat serves the text model).
// Tolerance (fp32): 1e-4 of the largest logit (parity::MaxRelDiff); 32 greedy
// tokens through the paged KV cache identical.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>

#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "model/io/model_folder.h"
#include "tests/parity/hf_parity_util.h"

namespace dikkat::model {
namespace {

constexpr double kLogitTolerance = 1e-4;

class HfGemma3Test : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<parity::HfSuite>> suite = parity::MakeHfSuite("gemma3");
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

  std::string folder() const { return suite_->Folder(GetParam()); }

  static parity::HfSuite* suite_;
  static std::string* error_;
};
parity::HfSuite* HfGemma3Test::suite_ = nullptr;
std::string* HfGemma3Test::error_ = nullptr;

TEST_P(HfGemma3Test, ConfigTranslation) {
  absl::StatusOr<ModelConfig> config = ReadModelConfig(folder());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->weight_layout, "gemma3");
  EXPECT_EQ(config->vocab_size, 320);
  EXPECT_EQ(config->n_layers, 3);
  EXPECT_EQ(config->max_positions, 64);
  EXPECT_EQ(config->norm, NormKind::kRmsNorm);
  EXPECT_DOUBLE_EQ(config->norm_weight_offset, 1.0);
  EXPECT_TRUE(config->sandwich_norm);
  EXPECT_TRUE(config->qk_norm);
  EXPECT_EQ(config->activation, Activation::kGeGluTanh);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_FALSE(config->mlp_bias);
  EXPECT_TRUE(config->tie_embeddings);
  EXPECT_EQ(config->kv_heads(), 2);
  EXPECT_EQ(config->head_size(), 32);
  EXPECT_DOUBLE_EQ(config->query_pre_attn_scalar, 24.0);
  EXPECT_DOUBLE_EQ(config->embedding_scale, 8.0);  // sqrt(64)
  EXPECT_TRUE(config->embedding_scale_in_weight_dtype);
  EXPECT_EQ(config->sliding_window, 4);
  EXPECT_EQ(config->full_attention_layers, (std::vector<int64_t>{2}));
  EXPECT_TRUE(config->layer_slides(0));
  EXPECT_FALSE(config->layer_slides(2));
  EXPECT_DOUBLE_EQ(config->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(config->rope_local_theta, 100.0);
  EXPECT_DOUBLE_EQ(config->rope_scaling, 2.0);
  EXPECT_EQ(config->bos_token_id, 2);
  EXPECT_EQ(config->eos_token_id, 1);
  EXPECT_EQ(config->more_eos_token_ids, (std::vector<int64_t>{106}));
}

TEST_P(HfGemma3Test, LogitsMatchReference) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder());
  ASSERT_TRUE(m.ok()) << m.status();
  // The multimodal folder's image encoder is left unused (and allowed).
  std::vector<std::string> unused = m->report.unused_tensors;
  std::sort(unused.begin(), unused.end());
  const std::vector<std::string> expected =
      GetParam() == "mm" ? std::vector<std::string>{"multi_modal_projector.mm_input_projection_weight",
                                                    "vision_tower.vision_model.embeddings.patch_"
                                                    "embedding.weight"}
                         : std::vector<std::string>{};
  EXPECT_EQ(unused, expected) << "unused: " << absl::StrJoin(unused, ", ");
  const double err = parity::MaxPromptLogitError(*suite_, *m->model);
  parity::ReportError("gemma3 " + GetParam() + " prompt logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

TEST_P(HfGemma3Test, GreedyGenerationWithKvCacheMatchesReference) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder());
  ASSERT_TRUE(m.ok()) << m.status();
  const double err = parity::CheckGreedy(*suite_, *m->model);
  parity::ReportError("gemma3 " + GetParam() + " cached prefill logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

// A served context shorter than the model's (--max_context): the RoPE
// tables stop there, shorter sequences run as before, longer ones are
// refused rather than read past the tables.
TEST_P(HfGemma3Test, ServedContextBoundsTheRotaryTables) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder(), at::kFloat, 20);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model->config().max_positions, 20);
  EXPECT_LT(parity::MaxPromptLogitError(*suite_, *m->model), kLogitTolerance);  // 9, 14 tokens
  const std::vector<int32_t> ids(21, 5);
  std::vector<SequenceChunk> chunks(1);
  chunks[0].tokens = ids;
  ForwardOptions options;
  options.last_logits = true;
  EXPECT_THROW(m->model->Decode(chunks, nullptr, options), std::exception);
  chunks[0].tokens = absl::MakeConstSpan(ids).first(20);
  EXPECT_NO_THROW(m->model->Decode(chunks, nullptr, options));
}

INSTANTIATE_TEST_SUITE_P(Folders, HfGemma3Test, ::testing::Values("st", "typed", "mm"));

// EmbeddingGemma's shape (make_hf_fixtures.py suite embeddinggemma): the
// gemma3 reference attending both ways (use_bidirectional_attention; the
// local layers see keys less than window / 2 + 1 = 4 positions away either
// way), in a sentence-transformers folder: mean pooling, a Dense without
// bias and with the default tanh (model.safetensors), a Dense with bias and
// Identity (pytorch_model.bin), Normalize. Hidden states and the embeddings Encode
// serves, both within 1e-4 of the reference's largest value.
TEST(HfEmbeddingGemmaTest, HiddenStatesAndEmbeddingsMatchReference) {
  absl::StatusOr<std::unique_ptr<parity::HfSuite>> suite = parity::MakeHfSuite("embeddinggemma");
  ASSERT_TRUE(suite.ok()) << suite.status();
  const std::string folder = (*suite)->Folder("st");
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(folder);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& config = m->model->config();
  EXPECT_EQ(config.architecture, Architecture::kEncoderOnly);
  EXPECT_EQ(config.sliding_window, 4);  // 6 / 2 + 1
  EXPECT_EQ(config.default_pooling, Pooling::kMean);
  EXPECT_TRUE(config.default_normalize);
  EXPECT_EQ(config.embedding_dim(), 48);
  EXPECT_EQ(config.max_seq_length, 64);
  EXPECT_TRUE(m->report.unused_tensors.empty())
      << "unused: " << absl::StrJoin(m->report.unused_tensors, ", ");
  double hidden_err = 0, embedding_err = 0;
  for (int b = 0; b < (*suite)->sequences(); ++b) {
    const std::vector<int32_t> ids = parity::Ids((*suite)->Expected("prompt", b));
    std::vector<SequenceChunk> chunks(1);
    chunks[0].tokens = ids;
    ForwardOptions options;
    options.hidden_layer = ForwardOptions::kFinalHidden;
    const at::Tensor hidden = m->model->Encode(chunks, options).hidden[0].to(at::kFloat);
    hidden_err = std::max(hidden_err, parity::MaxRelDiff(hidden, (*suite)->Expected("hidden", b)));
    // As the server's Encode: mean, the Dense modules, L2 normalization.
    at::Tensor e = m->model->ProjectEmbedding(hidden.mean(0));
    e = e / e.norm();
    embedding_err =
        std::max(embedding_err, parity::MaxRelDiff(e, (*suite)->Expected("embedding", b)));
  }
  parity::ReportError("embeddinggemma hidden states", hidden_err);
  parity::ReportError("embeddinggemma embeddings", embedding_err);
  EXPECT_LT(hidden_err, kLogitTolerance);
  EXPECT_LT(embedding_err, kLogitTolerance);
  parity::RemoveFixtures((*suite)->dir);
}

}  // namespace
}  // namespace dikkat::model
