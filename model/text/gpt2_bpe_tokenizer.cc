// GPT-2's own file pair: vocab.json (token -> id, a.k.a. encoder.json) and
// merges.txt (one "a b" merge per line in rank order, a.k.a. vocab.bpe).
#include "model/text/gpt2_bpe_tokenizer.h"

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/byte_level_bpe.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_files.h"
#include "nlohmann/json.hpp"

namespace dikkat::model {
namespace {

// Merges from merges.txt text (`path` names it in errors): an optional
// "#version" first line, then one "a b" pair per line in rank order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMergesTxt(
    const std::string& path, const std::string& contents) {
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream in(contents);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": a merge must be two tokens separated by one space, got \"", line,
          "\""));
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Bpe(const std::string& vocab_json,
                                                       const std::string& merges_txt) {
  DIKKAT_ASSIGN_OR_RETURN(std::string vocab_text, ReadTokenizerFile(vocab_json));
  DIKKAT_ASSIGN_OR_RETURN(std::string merges_text, ReadTokenizerFile(merges_txt));
  ByteLevelBpeSpec spec;
  const nlohmann::json vocab = nlohmann::json::parse(vocab_text, nullptr, false);
  if (vocab.is_discarded() || !vocab.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_json, ": expected a JSON object of token -> id"));
  }
  for (const auto& [token, id] : vocab.items()) {
    // get<int32_t>() would wrap a larger integer to another id.
    if (!id.is_number_integer() || (id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX) ||
        (!id.is_number_unsigned() &&
         (id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX))) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_json, ": id of \"", token, "\" is ",
                                                     id.dump(), ", not a 32-bit integer"));
    }
    spec.vocab.emplace(token, id.get<int32_t>());
  }
  DIKKAT_ASSIGN_OR_RETURN(spec.merges, ParseMergesTxt(merges_txt, merges_text));
  DIKKAT_ASSIGN_OR_RETURN(spec.fingerprints, FingerprintFiles({vocab_json, merges_txt}));
  auto tok = MakeByteLevelBpe(std::move(spec));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(vocab_json, " + ", merges_txt, ": ", tok.status().message()));
  }
  return tok;
}

}  // namespace dikkat::model
