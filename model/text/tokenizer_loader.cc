// The model-folder dispatch: which tokenizer files a folder has decides the kind.
#include "model/text/tokenizer_loader.h"

#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/gpt2_bpe_tokenizer.h"
#include "model/text/sentencepiece_tokenizer.h"
#include "model/text/tokenizer_json.h"
#include "model/text/wordpiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace dikkat::model {

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

// tokenizer_config.json as a JSON object; an empty one when the file is
// absent.
absl::StatusOr<nlohmann::json> ReadTokenizerConfig(const fs::path& path) {
  if (!IsFile(path)) return nlohmann::json::object();
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  }
  return j;
}

// The text of a special token entry ("<unk>" or {"content": "<unk>", ...});
// null when it has none.
const nlohmann::json* TokenContent(const nlohmann::json& entry) {
  const nlohmann::json* text = &entry;
  if (entry.is_object()) {
    auto content = entry.find("content");
    text = content == entry.end() ? nullptr : &*content;
  }
  return text != nullptr && text->is_string() ? text : nullptr;
}

// Hugging Face's BertTokenizer settings, when the folder has them.
absl::StatusOr<WordPieceOptions> WordPieceOptionsFromConfig(const fs::path& path) {
  WordPieceOptions options;
  DIKKAT_ASSIGN_OR_RETURN(const nlohmann::json j, ReadTokenizerConfig(path));
  const auto flag = [&](const char* key, bool fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  options.lower_case = flag("do_lower_case", true);
  options.strip_accents = flag("strip_accents", options.lower_case);  // null: follows lower-casing
  options.tokenize_chinese_chars = flag("tokenize_chinese_chars", true);
  if (auto it = j.find("unk_token"); it != j.end() && !it->is_null()) {
    const nlohmann::json* text = TokenContent(*it);
    if (text == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          path.string(), ": \"unk_token\" must be a string or {\"content\": string}, got ",
          it->dump()));
    }
    options.unk_token = text->get<std::string>();
  }
  return options;
}

}  // namespace

absl::StatusOr<int32_t> TokenizerConfigEos(const std::string& model_dir,
                                           const Tokenizer& tokenizer) {
  DIKKAT_ASSIGN_OR_RETURN(const nlohmann::json j,
                          ReadTokenizerConfig(fs::path(model_dir) / "tokenizer_config.json"));
  auto it = j.find("eos_token");
  if (it == j.end()) return -1;
  const nlohmann::json* text = TokenContent(*it);
  if (text == nullptr || text->get<std::string>().empty()) return -1;
  const std::string eos = text->get<std::string>();
  for (const auto& [special, id] : tokenizer.SpecialTexts()) {
    if (special == eos) return id;
  }
  absl::StatusOr<Encoding> enc = tokenizer.Encode(eos, /*add_special_tokens=*/false);
  if (enc.ok() && enc->ids.size() == 1) return enc->ids[0];
  return -1;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const bool has_bpe_pair = IsFile(dir / "vocab.json") && IsFile(dir / "merges.txt");
  const bool has_spm = IsFile(dir / "tokenizer.model");
  if (IsFile(dir / "tokenizer.json")) {
    auto tok = LoadTokenizerJson((dir / "tokenizer.json").string());
    // A tokenizer.json pipeline dikkat does not read falls back only to a
    // SentencePiece model (a Unigram tokenizer.json converted from it reads
    // the same text). Never to vocab.json + merges.txt: those hold no
    // normalizer, pre-tokenizer or added tokens, and Qwen2's and SmolLM's
    // (NFC, another split pattern, <|im_start|> only in tokenizer.json) would
    // load as GPT-2's and tokenize chat prompts as text, silently.
    if (tok.ok() || tok.status().code() != absl::StatusCode::kUnimplemented || !has_spm) {
      return tok;
    }
    return LoadSentencePiece((dir / "tokenizer.model").string());
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
