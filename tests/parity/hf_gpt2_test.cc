// A randomly initialised GPT-2 (n_embd 64, 4 heads, 2 layers, vocab 300)
// built from nn.TransformerEncoderLayer(norm_first=True, tanh-GELU) + causal
// mask and saved under GPT-2's Hugging Face names (Conv1D weights [in, out])
// as model.safetensors, pytorch_model.bin and sharded safetensors. Loaded via
// config.json translation + ConvertHfWeights; fixtures: make_hf_fixtures.py
// gpt2. Tolerance (fp32): 1e-4 of the largest logit (parity::MaxRelDiff); 32 greedy tokens identical.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/sha256_file.h"
#include "model/io/model_folder.h"
#include "model/model_loader.h"
#include "tests/parity/hf_parity_util.h"

namespace dikkat::model {
namespace {

constexpr double kLogitTolerance = 1e-4;

class HfGpt2Test : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<parity::HfSuite>> suite = parity::MakeHfSuite("gpt2");
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
parity::HfSuite* HfGpt2Test::suite_ = nullptr;
std::string* HfGpt2Test::error_ = nullptr;

TEST_P(HfGpt2Test, ConfigTranslatesToPreLnDecoder) {
  absl::StatusOr<ModelConfig> config = ReadModelConfig(suite_->Folder(GetParam()));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kDecoderOnly);
  EXPECT_EQ(config->weight_layout, "gpt2");
  EXPECT_EQ(config->d_model, 64);
  EXPECT_EQ(config->ffn_dim, 256);  // n_inner null -> 4 * n_embd
  EXPECT_EQ(config->activation, Activation::kGeluTanh);
  EXPECT_TRUE(config->pre_norm);
  EXPECT_TRUE(config->tie_embeddings);
  EXPECT_EQ(config->eos_token_id, 299);
}

TEST_P(HfGpt2Test, LogitsMatchPyTorch) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(suite_->Folder(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status();
  // Every tensor is used; only the mask buffers (and a tied lm_head copy) are dropped.
  EXPECT_TRUE(m->report.unused_tensors.empty())
      << "unused: " << absl::StrJoin(m->report.unused_tensors, ", ");
  EXPECT_EQ(std::count_if(m->dropped.begin(), m->dropped.end(),
                          [](const std::string& n) { return absl::EndsWith(n, "attn.bias"); }),
            2);
  if (GetParam() == "bin") {
    EXPECT_NE(std::find(m->dropped.begin(), m->dropped.end(), "lm_head.weight"), m->dropped.end());
  }
  const double err = parity::MaxPromptLogitError(*suite_, *m->model);
  parity::ReportError("gpt2 " + GetParam() + " prompt logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

TEST_P(HfGpt2Test, GreedyGenerationWithKvCacheMatchesPyTorch) {
  absl::StatusOr<parity::HfModel> m = parity::LoadHfFolder(suite_->Folder(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status();
  const double err = parity::CheckGreedy(*suite_, *m->model);
  parity::ReportError("gpt2 " + GetParam() + " cached prefill logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfGpt2Test, ::testing::Values("st", "bin", "sharded"),
                         [](const auto& info) { return info.param; });

// Whole-folder checks on one layout (same fixtures, no parameter).
class HfGpt2FolderTest : public HfGpt2Test {};

// The st/ folder carries a (tiny) vocab.json + merges.txt: the whole folder
// loads through the server's entry point.
TEST_F(HfGpt2FolderTest, LoadModelFolderServesTheWholeFolder) {
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(suite_->Folder("st"), LoadOptions());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(absl::EndsWith(loaded->config_path, "config.json")) << loaded->config_path;
  EXPECT_TRUE(absl::EndsWith(loaded->weights_path, "model.safetensors")) << loaded->weights_path;
  EXPECT_EQ(loaded->weights_sha256.size(), 64u);
  EXPECT_EQ(loaded->tokenizer->kind(), "gpt2-bpe");
  absl::StatusOr<Encoding> encoding = loaded->tokenizer->Encode("hello the world", false);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(loaded->tokenizer->Decode(encoding->ids, false), "hello the world");
  const double err = parity::MaxPromptLogitError(*suite_, *loaded->transformer);
  parity::ReportError("gpt2 LoadModelFolder prompt logits", err);
  EXPECT_LT(err, kLogitTolerance);
}

// A sharded checkpoint's fingerprint covers its shards, not the index alone:
// the SHA-256 of the index followed by each shard in name order.
TEST_F(HfGpt2FolderTest, ShardedFingerprintCoversEveryShard) {
  namespace fs = std::filesystem;
  const std::string folder = suite_->dir + "/sharded-served";
  fs::remove_all(folder);  // --gtest_repeat
  fs::copy(suite_->Folder("sharded"), folder, fs::copy_options::recursive);
  for (const char* file : {"vocab.json", "merges.txt"}) {
    fs::copy_file(suite_->Folder("st") + "/" + file, folder + "/" + file);
  }
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(folder, LoadOptions());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::string index = folder + "/model.safetensors.index.json";
  EXPECT_EQ(loaded->weights_path, index);
  absl::StatusOr<std::string> cat =
      Sha256Files({index, folder + "/model-00001-of-00002.safetensors",
                   folder + "/model-00002-of-00002.safetensors"});
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_EQ(loaded->weights_sha256, *cat);
  EXPECT_NE(loaded->weights_sha256, *Sha256File(index));
  // One byte of the second shard's data changed: another fingerprint.
  {
    std::fstream shard(folder + "/model-00002-of-00002.safetensors",
                       std::ios::in | std::ios::out | std::ios::binary);
    shard.seekp(-1, std::ios::end);
    shard.put('\x7f');
  }
  absl::StatusOr<LoadedModel> changed = LoadModelFolder(folder, LoadOptions());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_NE(changed->weights_sha256, loaded->weights_sha256);
}

TEST_F(HfGpt2FolderTest, FolderWithoutTokenizerIsAClearError) {
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(suite_->Folder("bin"), LoadOptions());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "no tokenizer")) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "vocab.json")) << loaded.status();
}

// A Conv1D weight saved in Linear's orientation by mistake: the error names
// both dikkat's tensor and the Hugging Face tensor it came from.
TEST_F(HfGpt2FolderTest, ShapeErrorsNameTheHuggingFaceTensor) {
  absl::StatusOr<ModelConfig> config = ReadModelConfig(suite_->Folder("st"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TensorMap> weights = ReadWeights(suite_->Folder("st"));
  ASSERT_TRUE(weights.ok()) << weights.status();
  (*weights)["transformer.h.1.mlp.c_fc.weight"] = (*weights)["transformer.h.1.mlp.c_fc.weight"].t();
  absl::StatusOr<HfWeights> hf = ConvertHfWeights(*config, *weights);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Load(*config, hf->tensors, LoadOptions(), nullptr);
  ASSERT_FALSE(model.ok());
  const absl::Status error = DescribeHfLoadError(model.status(), *config, *hf);
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(error.message(), "'layers.1.linear1.weight'")) << error;
  EXPECT_TRUE(absl::StrContains(error.message(), "'transformer.h.1.mlp.c_fc.weight'")) << error;
}

}  // namespace
}  // namespace dikkat::model
