#include "model/text/utf8.h"

#include <cstdint>

namespace dikkat::model::utf8 {
namespace {

// Table 3-7 of the Unicode Standard: for a lead byte, the sequence length and
// the allowed range of the second byte (later bytes are always 80..BF).
struct LeadInfo {
  size_t length;  // 0: not a valid lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo InfoForLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // caps at U+10FFFF
  return {0, 0, 0};
}

}  // namespace

size_t SequenceLength(std::string_view text, size_t pos, size_t* subpart_len) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const LeadInfo info = InfoForLead(byte(pos));
  if (info.length == 0) {
    if (subpart_len != nullptr) *subpart_len = 1;
    return 0;
  }
  for (size_t k = 1; k < info.length; ++k) {
    const size_t i = pos + k;
    const uint8_t lo = k == 1 ? info.second_lo : 0x80;
    const uint8_t hi = k == 1 ? info.second_hi : 0xBF;
    if (i >= text.size() || byte(i) < lo || byte(i) > hi) {
      // The bytes so far are a maximal subpart: a prefix of some valid
      // sequence that cannot be continued here.
      if (subpart_len != nullptr) *subpart_len = k;
      return 0;
    }
  }
  return info.length;
}

bool IsValid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = SequenceLength(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string ToValid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    const size_t n = SequenceLength(bytes, pos, &bad);
    if (n == 0) {
      out.append(kReplacementChar);
      pos += bad;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

std::vector<char32_t> Decode(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t bad = 0;
    const size_t n = SequenceLength(text, pos, &bad);
    if (n == 0) {
      out.push_back(0xFFFD);
      pos += bad;
      continue;
    }
    const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(text[pos + i])); };
    char32_t cp = 0;
    switch (n) {
      case 1: cp = b(0); break;
      case 2: cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F); break;
      case 3: cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F); break;
      default:
        cp = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
    out.push_back(cp);
    pos += n;
  }
  return out;
}

void Append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Encode(char32_t cp) {
  std::string s;
  Append(cp, &s);
  return s;
}

}  // namespace dikkat::model::utf8
