// UTF-8 helpers shared by the tokenizers. Internal to dikkat_text; the
// public entry point is IsValidUtf8 in tokenizer.h.
//
// Ill-formed input is handled the way Unicode 15 §3.9 ("U+FFFD Substitution
// of Maximal Subparts") recommends, which is also what Python's
// bytes.decode("utf-8", errors="replace") and Rust's from_utf8_lossy do, so
// our decoded text matches the reference tokenizers byte for byte.
#ifndef DIKKAT_MODEL_TEXT_UTF8_H_
#define DIKKAT_MODEL_TEXT_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dikkat::model::utf8 {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at text[pos] (1..4), or 0 if
// the bytes there are ill-formed or truncated. Sets *subpart_len (if not
// null) to the number of bytes one U+FFFD replaces when it returns 0.
size_t SequenceLength(std::string_view text, size_t pos, size_t* subpart_len = nullptr);

bool IsValid(std::string_view text);

// Copies `bytes`, replacing each maximal ill-formed subpart with U+FFFD.
std::string ToValid(std::string_view bytes);

// Code points of valid UTF-8 `text` (ill-formed subparts decode to U+FFFD).
std::vector<char32_t> Decode(std::string_view text);

void Append(char32_t code_point, std::string* out);
std::string Encode(char32_t code_point);

}  // namespace dikkat::model::utf8

#endif  // DIKKAT_MODEL_TEXT_UTF8_H_
