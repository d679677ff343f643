// File helpers shared by the tokenizer loaders. Internal to dikkat_text.
#ifndef DIKKAT_MODEL_TEXT_TOKENIZER_FILES_H_
#define DIKKAT_MODEL_TEXT_TOKENIZER_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dikkat::model {

// The whole file; NOT_FOUND naming the path if it cannot be read.
absl::StatusOr<std::string> ReadTokenizerFile(const std::string& path);

// Hex SHA-256 of each file, in order (Tokenizer::file_fingerprints).
absl::StatusOr<std::vector<std::string>> FingerprintFiles(const std::vector<std::string>& paths);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_FILES_H_
