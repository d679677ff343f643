// LoadModelFolder: a model folder on disk -> config, weights on the chosen
// device, tokenizer. The one entry point the server uses to load a model.
//
// A folder holds `dikkat.json` (dikkat's own config, docs/model-format.md)
// or a Hugging Face `config.json` (translated by hf_config.h; the tensors are
// then renamed by hf_weights.h, as for any config whose weight_layout is not
// "dikkat"), the weights (model.safetensors, a sharded
// model.safetensors.index.json, pytorch_model.bin or model.pt) and the
// tokenizer files. Errors name the file and what is wrong with it; a folder
// without tokenizer files is NOT_FOUND before any weights are read.
#ifndef DIKKAT_MODEL_MODEL_LOADER_H_
#define DIKKAT_MODEL_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/io/config.h"
#include "model/text/tokenizer.h"
#include "model/transformer.h"

namespace dikkat::model {

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<Tokenizer> tokenizer;
  LoadReport report;
  std::string config_path;
  std::string weights_path;    // the file (or index) the weights came from
  // SHA-256 of that file; of a sharded checkpoint's index followed by every
  // shard it names, in name order (as of `cat index shard1 shard2 ...`);
  // a sentence-transformers folder's Dense modules' weights files follow.
  std::string weights_sha256;
};

absl::StatusOr<LoadedModel> LoadModelFolder(const std::string& folder, const LoadOptions& options);

// Parses "float32" | "bfloat16" | "float16" | "int8" (-> Char: int8 weights,
// LoadOptions::dtype) and "cpu" | "cuda" | "cuda:N".
absl::StatusOr<c10::ScalarType> ParseDType(const std::string& name);
absl::StatusOr<c10::Device> ParseDevice(const std::string& name);

// The KV cache's dtype for weights stored in `weights_dtype`: the same, but
// float32 for int8 weights (their activations are float32).
c10::ScalarType CacheDType(c10::ScalarType weights_dtype);

// "float32", "bfloat16", "float16" or "int8" (ParseDType's names).
const char* DTypeName(c10::ScalarType dtype);

// --kv_cache_dtype: "auto" (CacheDType of the weights), float32, bfloat16 or
// float16 (or fp32 / bf16 / fp16). A 16-bit cache halves its memory (twice
// the tokens in the same --kv_cache_bytes) and the bytes a decode step reads;
// keys and values are rounded to it as they are written.
absl::StatusOr<c10::ScalarType> ParseKvCacheDType(const std::string& name,
                                                  c10::ScalarType weights_dtype);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_MODEL_LOADER_H_
