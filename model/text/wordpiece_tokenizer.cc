// BERT's tokenizer: BasicTokenizer (text clean-up, CJK and punctuation
// splitting, optional lower-casing and accent stripping) followed by greedy
// longest-match-first WordPiece. Unicode properties and case mapping come
// from ICU.
#include "model/text/wordpiece_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_files.h"
#include "model/text/utf8.h"

namespace dikkat::model {
namespace {

bool IsBertWhitespace(char32_t c) {
  if (c == U' ' || c == U'\t' || c == U'\n' || c == U'\r') return true;
  return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

// Every "Other" category (Cc, Cf, Co private use, Cn unassigned, Cs), except
// the whitespace BERT keeps: Hugging Face's rule, slow (category starts with
// "C") and fast (is_other) alike; Google's original dropped Cc and Cf only.
bool IsBertControl(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) != 0;
}

// ASCII symbols count as punctuation too ("$", "^", "`"), as in BERT.
bool IsBertPunctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

// The CJK Unified Ideographs blocks BERT splits per character (not Hangul,
// Hiragana or Katakana).
bool IsCjkIdeograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string ToU32(const icu::UnicodeString& s) {
  std::u32string out;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

icu::UnicodeString FromU32(const std::u32string& s) {
  icu::UnicodeString out;
  for (char32_t c : s) out.append(static_cast<UChar32>(c));
  return out;
}

class WordPieceTokenizer final : public Tokenizer {
 public:
  WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options,
                     std::vector<std::string> fingerprints)
      : vocab_(std::move(vocab)), options_(std::move(options)),
        fingerprints_(std::move(fingerprints)) {
    for (size_t id = 0; id < vocab_.size(); ++id) {
      // A repeated token keeps its last id, as BERT's load_vocab does.
      token_to_id_[vocab_[id]] = static_cast<int32_t>(id);
    }
    specials_.unk = Find(options_.unk_token);
    specials_.cls = Find("[CLS]");
    specials_.sep = Find("[SEP]");
    specials_.pad = Find("[PAD]");
    specials_.mask = Find("[MASK]");
    for (int32_t id : {specials_.cls, specials_.sep, specials_.pad, specials_.mask}) {
      if (id >= 0) special_ids_.insert(id);
    }
  }

  std::string kind() const override { return "wordpiece"; }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.size()); }
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<std::string> file_fingerprints() const override { return fingerprints_; }

  absl::StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const override {
    if (!utf8::IsValid(text)) {
      return absl::InvalidArgumentError("wordpiece tokenizer: input text is not valid UTF-8");
    }
    Encoding enc;
    for (const std::u32string& word : BasicTokenize(text)) WordPiece(word, &enc.ids);
    if (add_special_tokens) AddSpecialTokens(&enc);
    enc.type_ids.assign(enc.ids.size(), 0);
    return enc;
  }

  AddedTokens SpecialTokensAround() const override {
    AddedTokens added;
    if (specials_.cls >= 0) added.before.push_back(specials_.cls);
    if (specials_.sep >= 0) added.after.push_back(specials_.sep);
    return added;
  }

  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string out;
    const std::string& prefix = options_.continuing_subword_prefix;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (skip_special_tokens && IsSpecial(id)) continue;
      const std::string& token = vocab_[id];
      if (!prefix.empty() && token.compare(0, prefix.size(), prefix) == 0 && !out.empty()) {
        out.append(token, prefix.size(), std::string::npos);
      } else {
        if (!out.empty()) out += ' ';
        out += token;
      }
    }
    return utf8::ToValid(out);
  }

  std::string TokenText(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? vocab_[id] : "";
  }

  bool IsSpecial(int32_t id) const override { return special_ids_.count(id) > 0; }

 private:
  int32_t Find(const std::string& token) const {
    auto it = token_to_id_.find(token);
    return it == token_to_id_.end() ? -1 : it->second;
  }

  // BERT's BasicTokenizer: the words WordPiece runs on.
  std::vector<std::u32string> BasicTokenize(std::string_view text) const {
    // Clean: drop NUL, U+FFFD and control characters; whitespace -> ' ';
    // CJK ideographs become their own words.
    std::u32string cleaned;
    for (char32_t c : utf8::Decode(text)) {
      if (c == 0 || c == 0xFFFD || IsBertControl(c)) continue;
      if (IsBertWhitespace(c)) {
        cleaned.push_back(U' ');
      } else if (options_.tokenize_chinese_chars && IsCjkIdeograph(c)) {
        cleaned.append({U' ', c, U' '});
      } else {
        cleaned.push_back(c);
      }
    }
    std::vector<std::u32string> words;
    std::u32string word;
    const auto flush_word = [&] {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    };
    std::u32string token;
    for (size_t i = 0; i <= cleaned.size(); ++i) {
      if (i < cleaned.size() && cleaned[i] != U' ') {
        token.push_back(cleaned[i]);
        continue;
      }
      if (token.empty()) continue;
      // Case and accents are handled per whitespace token, then punctuation
      // splits it further.
      for (char32_t c : Normalize(token)) {
        if (IsBertPunctuation(c)) {
          flush_word();
          words.push_back(std::u32string(1, c));
        } else {
          word.push_back(c);
        }
      }
      flush_word();
      token.clear();
    }
    return words;
  }

  std::u32string Normalize(const std::u32string& token) const {
    if (!options_.lower_case && !options_.strip_accents) return token;
    icu::UnicodeString s = FromU32(token);
    if (options_.lower_case) s.toLower(icu::Locale::getRoot());
    if (!options_.strip_accents) return ToU32(s);
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status)) return ToU32(s);
    const icu::UnicodeString decomposed = nfd->normalize(s, status);
    if (U_FAILURE(status)) return ToU32(s);
    std::u32string out;
    for (char32_t c : ToU32(decomposed)) {
      if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
    }
    return out;
  }

  // Greedy longest-match-first; a word with any unmatched rest is one [UNK].
  void WordPiece(const std::u32string& word, std::vector<int32_t>* ids) const {
    if (static_cast<int>(word.size()) > options_.max_input_chars_per_word) {
      ids->push_back(specials_.unk);
      return;
    }
    std::vector<int32_t> pieces;
    for (size_t start = 0; start < word.size();) {
      int32_t found = -1;
      size_t end = word.size();
      for (; end > start; --end) {
        std::string candidate = start > 0 ? options_.continuing_subword_prefix : "";
        for (size_t k = start; k < end; ++k) utf8::Append(word[k], &candidate);
        found = Find(candidate);
        if (found >= 0) break;
      }
      if (found < 0) {
        ids->push_back(specials_.unk);
        return;
      }
      pieces.push_back(found);
      start = end;
    }
    ids->insert(ids->end(), pieces.begin(), pieces.end());
  }

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  WordPieceOptions options_;
  std::vector<std::string> fingerprints_;
  SpecialTokens specials_;
  std::unordered_set<int32_t> special_ids_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeWordPiece(std::vector<std::string> vocab,
                                                         const WordPieceOptions& options,
                                                         std::vector<std::string> fingerprints) {
  bool has_unk = false;
  for (const auto& t : vocab) has_unk |= t == options.unk_token;
  if (!has_unk) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wordpiece: the vocabulary (", vocab.size(), " tokens) has no unknown token \"",
        options.unk_token, "\""));
  }
  if (options.max_input_chars_per_word <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("wordpiece: max_input_chars_per_word is ",
                                                   options.max_input_chars_per_word,
                                                   "; must be positive"));
  }
  return std::make_unique<WordPieceTokenizer>(std::move(vocab), options, std::move(fingerprints));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWordPiece(const std::string& vocab_txt,
                                                         const WordPieceOptions& options) {
  DIKKAT_ASSIGN_OR_RETURN(std::string text, ReadTokenizerFile(vocab_txt));
  std::vector<std::string> vocab;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // BERT strips each line; the id is the line number.
    const size_t b = line.find_first_not_of(" \t\r\n");
    const size_t e = line.find_last_not_of(" \t\r\n");
    vocab.push_back(b == std::string::npos ? "" : line.substr(b, e - b + 1));
  }
  DIKKAT_ASSIGN_OR_RETURN(auto fingerprints, FingerprintFiles({vocab_txt}));
  auto tok = MakeWordPiece(std::move(vocab), options, std::move(fingerprints));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(vocab_txt, ": ", tok.status().message()));
  }
  return tok;
}

}  // namespace dikkat::model
