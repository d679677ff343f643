// SHA-256 of a file's bytes, for the fingerprints ModelInfo reports (weights
// and tokenizer files). Torch-free: the tokenizers (dikkat::text) and the
// weight readers (dikkat::io) both use it.
//
// Thread-safety: reentrant.
#ifndef DIKKAT_COMMON_SHA256_FILE_H_
#define DIKKAT_COMMON_SHA256_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dikkat {

// Lower-case hex SHA-256 of the file at `path`. NOT_FOUND (or the errno's
// code) naming the path if it cannot be opened or read.
absl::StatusOr<std::string> Sha256File(const std::string& path);

// The SHA-256 of the files' bytes one after another (as of `cat` of them):
// one fingerprint of a checkpoint in several files.
absl::StatusOr<std::string> Sha256Files(const std::vector<std::string>& paths);

}  // namespace dikkat

#endif  // DIKKAT_COMMON_SHA256_FILE_H_
