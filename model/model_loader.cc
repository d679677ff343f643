#include "model/model_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/Context.h>
#include <c10/core/Device.h>

#include "absl/strings/str_cat.h"
#include "common/sha256_file.h"
#include "common/status_macros.h"
#include "model/io/hf_config.h"
#include "model/io/hf_weights.h"
#include "model/io/weights.h"
#include "model/text/tokenizer_loader.h"

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

// The weights file LoadModelFolder reads, in order of preference.
absl::StatusOr<std::string> FindWeights(const std::string& folder) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json",
                           "pytorch_model.bin", "model.pt"}) {
    fs::path p = fs::path(folder) / name;
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(absl::StrCat(
      "no weights in ", folder,
      "; looked for model.safetensors, model.safetensors.index.json, pytorch_model.bin, model.pt"));
}

// dikkat.json wins over config.json: it lets a user override a translation.
absl::StatusOr<std::string> FindConfig(const std::string& folder) {
  for (const char* name : {"dikkat.json", "config.json"}) {
    fs::path p = fs::path(folder) / name;
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(
      absl::StrCat("no model config in ", folder, "; looked for dikkat.json and config.json"));
}

}  // namespace

absl::StatusOr<c10::ScalarType> ParseDType(const std::string& name) {
  if (name == "float32" || name == "fp32") return c10::ScalarType::Float;
  if (name == "bfloat16" || name == "bf16") return c10::ScalarType::BFloat16;
  if (name == "float16" || name == "fp16") return c10::ScalarType::Half;
  if (name == "int8") return c10::ScalarType::Char;
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype '", name, "' is not supported; use float32, bfloat16, float16 or int8"));
}

c10::ScalarType CacheDType(c10::ScalarType weights_dtype) {
  return weights_dtype == c10::ScalarType::Char ? c10::ScalarType::Float : weights_dtype;
}

absl::StatusOr<c10::Device> ParseDevice(const std::string& name) {
  try {
    c10::Device device(name);
    if (device.is_cuda() && !at::hasCUDA()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", name, "' requested but this LibTorch build has no CUDA support; use cpu"));
    }
    if (!device.is_cpu() && !device.is_cuda()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", name, "' is not supported; use cpu or cuda:N"));
    }
    return device;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", name, "' is not a device name; use cpu or cuda:N"));
  }
}

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& folder) {
  if (!fs::is_directory(folder)) {
    return absl::NotFoundError(absl::StrCat("model folder ", folder, " does not exist"));
  }
  DIKKAT_ASSIGN_OR_RETURN(const std::string path, FindConfig(folder));
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
    absl::StatusOr<Pooling> pooling = ParseSentenceTransformersPooling(pooling_text);
    if (!pooling.ok()) return WithFile(pooling.status(), pooling_path);
    config->default_pooling = *pooling;
  }
  return config;
}

absl::StatusOr<LoadedModel> LoadModelFolder(const std::string& folder, const LoadOptions& options) {
  LoadedModel loaded;
  DIKKAT_ASSIGN_OR_RETURN(loaded.config, ReadModelConfig(folder));
  DIKKAT_ASSIGN_OR_RETURN(loaded.config_path, FindConfig(folder));
  // The tokenizer first: it is cheap, and a missing one should not cost a
  // multi-gigabyte weights load before the error.
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(folder);
  if (!tokenizer.ok()) {
    if (!absl::IsNotFound(tokenizer.status())) return tokenizer.status();
    return absl::NotFoundError(absl::StrCat(
        "model folder ", folder, " has a model (", loaded.config_path,
        ") but no tokenizer, and dikkat serves text: ", tokenizer.status().message(),
        ". Copy the tokenizer files of the model (e.g. from the same Hugging Face repository) "
        "into the folder"));
  }
  loaded.tokenizer = std::move(*tokenizer);
  if (loaded.tokenizer->vocab_size() > loaded.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        folder, ": the tokenizer has ", loaded.tokenizer->vocab_size(),
        " tokens but the model's vocab_size is ", loaded.config.vocab_size));
  }
  DIKKAT_ASSIGN_OR_RETURN(loaded.weights_path, FindWeights(folder));
  absl::StatusOr<TensorMap> weights = ReadWeights(loaded.weights_path);
  if (!weights.ok()) return WithFile(weights.status(), loaded.weights_path);
  if (loaded.config.weight_layout == "dikkat") {
    absl::StatusOr<std::unique_ptr<Transformer>> transformer =
        Transformer::Load(loaded.config, *weights, options, &loaded.report);
    if (!transformer.ok()) return WithFile(transformer.status(), loaded.weights_path);
    loaded.transformer = std::move(*transformer);
  } else {
    absl::StatusOr<HfWeights> hf = ConvertHfWeights(loaded.config, *weights);
    if (!hf.ok()) return WithFile(hf.status(), loaded.weights_path);
    weights->clear();  // the renamed map holds the only references now
    absl::StatusOr<std::unique_ptr<Transformer>> transformer =
        Transformer::Load(loaded.config, hf->tensors, options, &loaded.report);
    if (!transformer.ok()) {
      return WithFile(DescribeHfLoadError(transformer.status(), loaded.config, *hf),
                      loaded.weights_path);
    }
    loaded.transformer = std::move(*transformer);
  }
  DIKKAT_ASSIGN_OR_RETURN(loaded.weights_sha256, Sha256File(loaded.weights_path));
  return loaded;
}

}  // namespace dikkat::model
