#include "model/model_loader.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <c10/core/Device.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256_file.h"
#include "common/status_macros.h"
#include "model/io/hf_weights.h"
#include "model/io/model_folder.h"
#include "model/io/safetensors.h"
#include "model/io/weights.h"
#include "model/text/tokenizer_loader.h"

namespace dikkat::model {
namespace {

// The files a checkpoint's fingerprint covers: the weights file, or a
// sharded checkpoint's index followed by every shard it names (in name
// order): a changed shard changes the fingerprint.
absl::StatusOr<std::vector<std::string>> FingerprintedFiles(const std::string& weights_path) {
  if (!absl::EndsWith(weights_path, ".index.json")) return std::vector<std::string>{weights_path};
  std::ifstream in(weights_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", weights_path));
  std::ostringstream text;
  text << in.rdbuf();
  DIKKAT_ASSIGN_OR_RETURN(const auto shards, ParseSafetensorsIndex(text.str(), weights_path));
  std::vector<std::string> files = {weights_path};
  const std::filesystem::path dir = std::filesystem::path(weights_path).parent_path();
  for (const auto& [shard, names] : shards) files.push_back((dir / shard).string());
  return files;
}

absl::Status WithFile(const absl::Status& s, const std::string& path) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
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

const char* DTypeName(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::Char: return "int8";
    default: return c10::toString(dtype);
  }
}

absl::StatusOr<c10::ScalarType> ParseKvCacheDType(const std::string& name,
                                                  c10::ScalarType weights_dtype) {
  if (name == "auto") return CacheDType(weights_dtype);
  absl::StatusOr<c10::ScalarType> dtype = ParseDType(name);
  if (!dtype.ok() || *dtype == c10::ScalarType::Char) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_cache_dtype '", name,
        "' is not supported; use auto (the weights' dtype, float32 for int8), float32, "
        "bfloat16 or float16"));
  }
  return *dtype;
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

absl::StatusOr<LoadedModel> LoadModelFolder(const std::string& folder, const LoadOptions& options) {
  LoadedModel loaded;
  DIKKAT_ASSIGN_OR_RETURN(loaded.config, ReadModelConfig(folder));
  DIKKAT_ASSIGN_OR_RETURN(loaded.config_path, FindModelConfig(folder));
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
  // Generation also ends at the tokenizer's own end-of-sequence token, as
  // vLLM's does (tokenizer_config.json's eos_token may be the chat turn's end,
  // which config.json does not name).
  if (loaded.config.has_decoder()) {
    AddEosTokenId(&loaded.config, loaded.tokenizer->special_tokens().eos);
    DIKKAT_ASSIGN_OR_RETURN(const int32_t config_eos,
                            TokenizerConfigEos(folder, *loaded.tokenizer));
    AddEosTokenId(&loaded.config, config_eos);
  }
  DIKKAT_ASSIGN_OR_RETURN(loaded.weights_path, FindWeightsFile(folder));
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
    DIKKAT_RETURN_IF_ERROR(AddDenseModuleWeights(folder, loaded.config, &*hf));
    absl::StatusOr<std::unique_ptr<Transformer>> transformer =
        Transformer::Load(loaded.config, hf->tensors, options, &loaded.report);
    if (!transformer.ok()) {
      return WithFile(DescribeHfLoadError(transformer.status(), loaded.config, *hf),
                      loaded.weights_path);
    }
    if (absl::Status s = CheckUnusedHfTensors(loaded.report.unused_tensors, *hf, loaded.config);
        !s.ok()) {
      return WithFile(s, loaded.weights_path);
    }
    loaded.transformer = std::move(*transformer);
  }
  DIKKAT_ASSIGN_OR_RETURN(std::vector<std::string> fingerprinted,
                          FingerprintedFiles(loaded.weights_path));
  // A sentence-transformers folder's Dense modules change the embeddings
  // served: their weights files follow, in module order.
  // (A dikkat.json folder's embedding_dense is in its weights file.)
  std::vector<std::string> dense;
  if (loaded.config.weight_layout != "dikkat") {
    DIKKAT_ASSIGN_OR_RETURN(dense, DenseModulePaths(folder));
  }
  for (const std::string& module : dense) {
    DIKKAT_ASSIGN_OR_RETURN(std::string file,
                            FindWeightsFile((std::filesystem::path(folder) / module).string()));
    fingerprinted.push_back(std::move(file));
  }
  DIKKAT_ASSIGN_OR_RETURN(loaded.weights_sha256, Sha256Files(fingerprinted));
  return loaded;
}

}  // namespace dikkat::model
