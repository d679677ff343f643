// A model folder on disk, as far as io is concerned: which file holds the
// config and which the weights, and the config itself (cheap; no weights).
// Loading the weights into layers and the tokenizer is LoadModelFolder's job
// (model/model_loader.h). Thread-safety: the functions are reentrant.
#ifndef DIKKAT_MODEL_IO_MODEL_FOLDER_H_
#define DIKKAT_MODEL_IO_MODEL_FOLDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/io/config.h"

namespace dikkat::model {

// `dikkat.json`, else `config.json` (dikkat.json wins: it lets a user
// override a translation). NOT_FOUND names both.
absl::StatusOr<std::string> FindModelConfig(const std::string& folder);

// The weights file, in order of preference: model.safetensors,
// model.safetensors.index.json, pytorch_model.bin, model.pt. NOT_FOUND names
// them all.
absl::StatusOr<std::string> FindWeightsFile(const std::string& folder);

// The folder's ModelConfig: dikkat.json parsed as is, or a Hugging Face
// config.json translated by hf_config.h (with a sentence-transformers
// `1_Pooling/config.json` setting default_pooling). Errors name the file.
absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& folder);

// The folders of a sentence-transformers folder's Dense modules, in the order
// modules.json lists them (none without a modules.json); `config`, when
// given, takes what modules.json says (default_normalize). Errors name the
// file.
absl::StatusOr<std::vector<std::string>> DenseModulePaths(const std::string& folder,
                                                          ModelConfig* config = nullptr);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_MODEL_FOLDER_H_
