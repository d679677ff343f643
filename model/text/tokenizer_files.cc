#include "model/text/tokenizer_files.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sha256_file.h"
#include "common/status_macros.h"

namespace dikkat::model {

absl::StatusOr<std::string> ReadTokenizerFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading tokenizer file ", path));
  return ss.str();
}

absl::StatusOr<std::vector<std::string>> FingerprintFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const auto& p : paths) {
    DIKKAT_ASSIGN_OR_RETURN(std::string digest, Sha256File(p));
    out.push_back(std::move(digest));
  }
  return out;
}

}  // namespace dikkat::model
