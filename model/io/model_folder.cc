// Which files of a model folder hold the config and the weights, and the
// config read from it. LoadModelFolder (model/model_loader.h) builds on these.
#include "model/io/model_folder.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/io/hf_config.h"

namespace dikkat::model {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WithFile(const absl::Status& s, const std::string& path) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::string> FindModelConfig(const std::string& folder) {
  for (const char* name : {"dikkat.json", "config.json"}) {
    fs::path p = fs::path(folder) / name;
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(
      absl::StrCat("no model config in ", folder, "; looked for dikkat.json and config.json"));
}

absl::StatusOr<std::string> FindWeightsFile(const std::string& folder) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json",
                           "pytorch_model.bin", "model.pt"}) {
    fs::path p = fs::path(folder) / name;
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(absl::StrCat(
      "no weights in ", folder,
      "; looked for model.safetensors, model.safetensors.index.json, pytorch_model.bin, model.pt"));
}

absl::StatusOr<std::vector<std::string>> DenseModulePaths(const std::string& folder,
                                                          ModelConfig* config) {
  const std::string path = (fs::path(folder) / "modules.json").string();
  std::vector<std::string> dense;
  if (!fs::exists(path)) return dense;
  DIKKAT_ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  ModelConfig scratch;
  if (absl::Status s = MergeSentenceTransformersModules(text, config ? config : &scratch, &dense);
      !s.ok()) {
    return WithFile(s, path);
  }
  return dense;
}

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& folder) {
  if (!fs::is_directory(folder)) {
    return absl::NotFoundError(absl::StrCat("model folder ", folder, " does not exist"));
  }
  DIKKAT_ASSIGN_OR_RETURN(const std::string path, FindModelConfig(folder));
  DIKKAT_ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  if (fs::path(path).filename() == "dikkat.json") {
    absl::StatusOr<ModelConfig> config = ParseModelConfigJson(text);
    if (!config.ok()) return WithFile(config.status(), path);
    return config;
  }
  absl::StatusOr<ModelConfig> config = TranslateHfConfig(text);
  if (!config.ok()) return WithFile(config.status(), path);
  // A sentence-transformers folder says how its embeddings are pooled.
  const std::string pooling_path = (fs::path(folder) / "1_Pooling" / "config.json").string();
  if (fs::exists(pooling_path)) {
    DIKKAT_ASSIGN_OR_RETURN(const std::string pooling_text, ReadText(pooling_path));
    absl::StatusOr<Pooling> pooling =
        ParseSentenceTransformersPooling(pooling_text, &config->pooling_includes_prompt);
    if (!pooling.ok()) return WithFile(pooling.status(), pooling_path);
    config->default_pooling = *pooling;
  }
  // Its other modules (Dense, Normalize), and the longest input it embeds.
  DIKKAT_ASSIGN_OR_RETURN(const std::vector<std::string> dense, DenseModulePaths(folder, &*config));
  for (const std::string& module : dense) {
    const std::string dense_path = (fs::path(folder) / module / "config.json").string();
    DIKKAT_ASSIGN_OR_RETURN(const std::string dense_text, ReadText(dense_path));
    absl::StatusOr<EmbeddingDense> layer = ParseSentenceTransformersDense(dense_text);
    if (!layer.ok()) return WithFile(layer.status(), dense_path);
    config->embedding_dense.push_back(*layer);
  }
  if (!dense.empty()) {
    if (absl::Status s = Validate(*config); !s.ok()) {
      return WithFile(s, (fs::path(folder) / "modules.json").string());
    }
  }
  // Its named prompts (EmbeddingGemma's query / document prompts).
  const std::string prompts_path =
      (fs::path(folder) / "config_sentence_transformers.json").string();
  if (fs::exists(prompts_path)) {
    DIKKAT_ASSIGN_OR_RETURN(const std::string prompts_text, ReadText(prompts_path));
    if (absl::Status s = MergeSentenceTransformersPrompts(prompts_text, &*config); !s.ok()) {
      return WithFile(s, prompts_path);
    }
  }
  const std::string bert_path = (fs::path(folder) / "sentence_bert_config.json").string();
  if (fs::exists(bert_path)) {
    DIKKAT_ASSIGN_OR_RETURN(const std::string bert_text, ReadText(bert_path));
    if (absl::Status s = MergeSentenceBertConfig(bert_text, &*config); !s.ok()) {
      return WithFile(s, bert_path);
    }
  }
  // generate() stops at generation_config.json's EOS ids (Llama-3 Instruct
  // lists <|eot_id|> there), which config.json may not hold.
  const std::string generation_path = (fs::path(folder) / "generation_config.json").string();
  if (fs::exists(generation_path)) {
    DIKKAT_ASSIGN_OR_RETURN(const std::string generation_text, ReadText(generation_path));
    if (absl::Status s = MergeHfGenerationConfig(generation_text, &*config); !s.ok()) {
      return WithFile(s, generation_path);
    }
  }
  return config;
}

}  // namespace dikkat::model
