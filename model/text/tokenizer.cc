// Tokenizer-independent pieces: UTF-8 validation, streaming decode, and the
// model-folder dispatch.
#include "model/text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/text/utf8.h"
#include "nlohmann/json.hpp"

namespace dikkat::model {

bool IsValidUtf8(std::string_view text) { return utf8::IsValid(text); }

// ---- IncrementalDecoder ------------------------------------------------------
//
// Invariant: the text of ids_[0, read_offset_) has been emitted, and
// ids_[prefix_offset_, read_offset_) is the window kept as left context: its
// decoded text is subtracted from the decoding of ids_[prefix_offset_, end)
// to get the delta. Decoding with left context is what makes tokenizers
// whose output depends on the neighbours (SentencePiece drops the "▁" of the
// first piece) stream the same text as one Decode of the whole sequence.

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                                       std::vector<int32_t> context)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens), ids_(std::move(context)) {
  read_offset_ = ids_.size();
}

std::string IncrementalDecoder::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_->Decode(std::vector<int32_t>(ids_.begin() + begin, ids_.begin() + end),
                            skip_special_);
}

std::string IncrementalDecoder::TakeDelta(bool flush) {
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  // A trailing U+FFFD means the last ids end inside a multi-byte character
  // (byte-level BPE, byte fallback): wait for the rest of it.
  const bool incomplete = new_text.size() >= utf8::kReplacementChar.size() &&
                          new_text.compare(new_text.size() - utf8::kReplacementChar.size(),
                                           std::string::npos, utf8::kReplacementChar) == 0;
  if (new_text.size() <= prefix_text.size() || (incomplete && !flush)) return "";
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Forget ids that can no longer be part of any window.
  ids_.erase(ids_.begin(), ids_.begin() + prefix_offset_);
  read_offset_ -= prefix_offset_;
  prefix_offset_ = 0;
  return delta;
}

std::string IncrementalDecoder::Push(int32_t id) {
  ids_.push_back(id);
  return TakeDelta(/*flush=*/false);
}

std::string IncrementalDecoder::Flush() { return TakeDelta(/*flush=*/true); }

// ---- LoadTokenizer -----------------------------------------------------------

namespace {

namespace fs = std::filesystem;

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The "tokenizer" field of dikkat.json, or "" if the file or field is absent.
absl::StatusOr<std::string> DikkatJsonTokenizer(const fs::path& path) {
  if (!IsFile(path)) return std::string();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  }
  auto it = j.find("tokenizer");
  if (it == j.end()) return std::string();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": \"tokenizer\" must be a string, got ", it->dump()));
  }
  return it->get<std::string>();
}

// Hugging Face's BertTokenizer settings, when the folder has them.
absl::StatusOr<WordPieceOptions> WordPieceOptionsFromConfig(const fs::path& path) {
  WordPieceOptions options;
  if (!IsFile(path)) return options;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  }
  const auto flag = [&](const char* key, bool fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  options.lower_case = flag("do_lower_case", true);
  options.strip_accents = flag("strip_accents", options.lower_case);  // null: follows lower-casing
  options.tokenize_chinese_chars = flag("tokenize_chinese_chars", true);
  if (auto it = j.find("unk_token"); it != j.end()) {
    if (it->is_string()) options.unk_token = it->get<std::string>();
    if (it->is_object() && it->contains("content")) options.unk_token = (*it)["content"].get<std::string>();
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const bool has_bpe_pair = IsFile(dir / "vocab.json") && IsFile(dir / "merges.txt");
  const bool has_spm = IsFile(dir / "tokenizer.model");
  if (IsFile(dir / "tokenizer.json")) {
    auto tok = LoadTokenizerJson((dir / "tokenizer.json").string());
    // Folders with a tokenizer.json pipeline dikkat does not read (e.g. a
    // Unigram model) often also ship the original files, which read the
    // same text.
    if (tok.ok() || tok.status().code() != absl::StatusCode::kUnimplemented ||
        !(has_bpe_pair || has_spm)) {
      return tok;
    }
  }
  if (has_bpe_pair) {
    return LoadGpt2Bpe((dir / "vocab.json").string(), (dir / "merges.txt").string());
  }
  if (has_spm) return LoadSentencePiece((dir / "tokenizer.model").string());
  if (IsFile(dir / "vocab.txt")) {
    DIKKAT_ASSIGN_OR_RETURN(WordPieceOptions options,
                            WordPieceOptionsFromConfig(dir / "tokenizer_config.json"));
    return LoadWordPiece((dir / "vocab.txt").string(), options);
  }
  auto from_config = DikkatJsonTokenizer(dir / "dikkat.json");
  if (!from_config.ok()) return from_config.status();
  if (*from_config == "byte") return MakeByteTokenizer();
  if (!from_config->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        (dir / "dikkat.json").string(), ": \"tokenizer\" is \"", *from_config,
        "\"; allowed without tokenizer files: \"byte\""));
  }
  return absl::NotFoundError(absl::StrCat(
      "no tokenizer in ", model_dir,
      ": looked for tokenizer.json, vocab.json + merges.txt, tokenizer.model, vocab.txt, "
      "and \"tokenizer\": \"byte\" in dikkat.json"));
}

}  // namespace dikkat::model
