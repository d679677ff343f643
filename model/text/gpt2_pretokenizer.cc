#include "model/text/gpt2_pretokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstddef>

#include "model/text/utf8.h"

namespace dikkat::model {
namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass Classify(char32_t c) {
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE)) return CharClass::kSpace;
  return CharClass::kOther;
}

// Code points with their classes and byte offsets (offsets has one extra
// entry: the text's length).
struct Decoded {
  std::vector<char32_t> cps;
  std::vector<CharClass> cls;
  std::vector<size_t> offsets;
};

Decoded DecodeText(std::string_view text) {
  Decoded d;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = utf8::SequenceLength(text, pos);
    if (n == 0) n = 1;  // unreachable for valid input; keeps progress
    const std::vector<char32_t> one = utf8::Decode(text.substr(pos, n));
    d.cps.push_back(one.empty() ? 0xFFFD : one[0]);
    d.cls.push_back(Classify(d.cps.back()));
    d.offsets.push_back(pos);
    pos += n;
  }
  d.offsets.push_back(text.size());
  return d;
}

// Length (in code points) of the contraction at i ('s 't 're 've 'm 'll 'd),
// or 0. `ignore_case`: (?i:...), with simple case folding as the regex
// engines apply it (U+017F LATIN SMALL LETTER LONG S folds to s).
size_t MatchContraction(const Decoded& d, size_t i, bool ignore_case = false) {
  if (d.cps[i] != U'\'') return 0;
  const auto at = [&](size_t k) -> char32_t {
    if (i + k >= d.cps.size()) return 0;
    const char32_t c = d.cps[i + k];
    if (!ignore_case) return c;
    if (c == 0x017F) return U's';
    return c >= U'A' && c <= U'Z' ? c - U'A' + U'a' : c;
  };
  for (const char32_t* suffix : {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"}) {
    size_t k = 0;
    while (suffix[k] != 0 && at(k + 1) == suffix[k]) ++k;
    if (suffix[k] == 0) return k + 1;
  }
  return 0;
}

size_t RunOf(const Decoded& d, size_t i, CharClass c) {
  size_t j = i;
  while (j < d.cls.size() && d.cls[j] == c) ++j;
  return j - i;
}

// Length of the chunk starting at code point i (always >= 1).
size_t MatchAt(const Decoded& d, size_t i) {
  const size_t n = d.cps.size();
  if (size_t len = MatchContraction(d, i)) return len;
  // " ?X+" for X in letters, numbers, and "neither space, letter nor number".
  const bool space_prefix = d.cps[i] == U' ' && i + 1 < n;
  const size_t start = space_prefix ? i + 1 : i;
  for (CharClass c : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther}) {
    if (d.cls[start] == c) return (start - i) + RunOf(d, start, c);
  }
  // \s+(?!\S): the whitespace run, minus its last character when a
  // non-space follows (that character then prefixes the next chunk).
  const size_t run = RunOf(d, i, CharClass::kSpace);
  if (i + run == n || run == 1) return run;  // run == 1: \s+(?!\S) fails, \s+ takes it
  return run - 1;
}

bool IsNewline(char32_t c) { return c == U'\r' || c == U'\n'; }

size_t MatchLlama3At(const Decoded& d, size_t i, size_t max_digits) {
  const size_t n = d.cps.size();
  if (size_t len = MatchContraction(d, i, /*ignore_case=*/true)) return len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (d.cls[i] != CharClass::kLetter && d.cls[i] != CharClass::kNumber && !IsNewline(d.cps[i]) &&
      i + 1 < n && d.cls[i + 1] == CharClass::kLetter) {
    return 1 + RunOf(d, i + 1, CharClass::kLetter);
  }
  if (d.cls[i] == CharClass::kLetter) return RunOf(d, i, CharClass::kLetter);
  // \p{N}{1,D}
  if (d.cls[i] == CharClass::kNumber) return std::min(RunOf(d, i, CharClass::kNumber), max_digits);
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t start = d.cps[i] == U' ' && i + 1 < n && d.cls[i + 1] == CharClass::kOther ? i + 1 : i;
  if (d.cls[start] == CharClass::kOther) {
    size_t j = start + RunOf(d, start, CharClass::kOther);
    while (j < n && IsNewline(d.cps[j])) ++j;
    return j - i;
  }
  // What is left starts with white space.
  const size_t run = RunOf(d, i, CharClass::kSpace);
  // \s*[\r\n]+: through the run's last newline.
  for (size_t j = i + run; j > i; --j) {
    if (IsNewline(d.cps[j - 1])) return j - i;
  }
  // \s+(?!\S), else \s+.
  if (i + run == n || run == 1) return run;
  return run - 1;
}

}  // namespace

const char kLlama3SplitPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char kQwen2SplitPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::vector<std::string_view> Llama3PreTokenize(std::string_view text, int max_digits) {
  const Decoded d = DecodeText(text);
  std::vector<std::string_view> chunks;
  const size_t digits = static_cast<size_t>(std::max(max_digits, 1));
  for (size_t i = 0; i < d.cps.size();) {
    const size_t len = MatchLlama3At(d, i, digits);
    chunks.push_back(text.substr(d.offsets[i], d.offsets[i + len] - d.offsets[i]));
    i += len;
  }
  return chunks;
}

std::vector<std::string_view> SplitDigits(std::string_view text) {
  const Decoded d = DecodeText(text);
  std::vector<std::string_view> pieces;
  size_t begin = 0;  // code point index of the current non-digit piece
  for (size_t i = 0; i < d.cps.size(); ++i) {
    if (d.cls[i] != CharClass::kNumber) continue;
    if (begin < i) pieces.push_back(text.substr(d.offsets[begin], d.offsets[i] - d.offsets[begin]));
    pieces.push_back(text.substr(d.offsets[i], d.offsets[i + 1] - d.offsets[i]));
    begin = i + 1;
  }
  if (begin < d.cps.size()) pieces.push_back(text.substr(d.offsets[begin]));
  return pieces;
}

std::vector<std::string_view> Gpt2PreTokenize(std::string_view text) {
  const Decoded d = DecodeText(text);
  std::vector<std::string_view> chunks;
  for (size_t i = 0; i < d.cps.size();) {
    const size_t len = MatchAt(d, i);
    chunks.push_back(text.substr(d.offsets[i], d.offsets[i + len] - d.offsets[i]));
    i += len;
  }
  return chunks;
}

}  // namespace dikkat::model
