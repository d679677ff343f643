#include "model/chat/python_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

namespace dikkat::chat {
namespace {

// Decodes the code point at s[i] (invalid bytes decode as themselves).
uint32_t CodePointAt(std::string_view s, size_t i, size_t* length) {
  const size_t n = Utf8Length(s, i);
  *length = n;
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  if (n == 1) return byte(0);
  uint32_t cp = byte(0) & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  return cp;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Not str.isprintable(): control, format, separator (but ' ') code points.
bool IsNonPrintable(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
         (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
         (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

std::string ReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = CodePointAt(s, i, &n);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (IsNonPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  out += quote;
  return out;
}

void JsonString(std::string_view s, std::string* out) {
  *out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

// indent: null for json.dumps(indent=None); else the unit per level.
void Dump(const Value& v, const std::string* indent, int level, size_t max_bytes,
          std::string* out) {
  if (out->size() > max_bytes) {
    FailLimit("tojson output exceeds " + std::to_string(max_bytes) + " bytes");
  }
  using K = Value::Kind;
  const auto newline = [&](int at) {
    if (out->size() + indent->size() * at + 1 > max_bytes) {
      FailLimit("tojson output exceeds " + std::to_string(max_bytes) + " bytes");
    }
    *out += '\n';
    for (int i = 0; i < at; ++i) *out += *indent;
  };
  switch (v.kind()) {
    case K::kNone:
      *out += "null";
      return;
    case K::kBool:
      *out += v.boolean() ? "true" : "false";
      return;
    case K::kInt:
      *out += std::to_string(v.integer());
      return;
    case K::kFloat: {
      const double f = v.number();
      if (std::isnan(f)) {
        *out += "NaN";
      } else if (std::isinf(f)) {
        *out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PyFloat(f);
      }
      return;
    }
    case K::kString:
      JsonString(v.str(), out);
      return;
    case K::kList: {
      if (v.list().generator) Fail("Object of type generator is not JSON serializable");
      const auto& items = v.list().items;
      if (items.empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += indent != nullptr ? "," : ", ";
        if (indent != nullptr) newline(level + 1);
        Dump(items[i], indent, level + 1, max_bytes, out);
      }
      if (indent != nullptr) newline(level);
      *out += ']';
      return;
    }
    case K::kDict: {
      const auto& entries = v.dict().entries;
      if (entries.empty()) {
        *out += "{}";
        return;
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += indent != nullptr ? "," : ", ";
        if (indent != nullptr) newline(level + 1);
        JsonString(entries[i].first, out);
        *out += ": ";
        Dump(entries[i].second, indent, level + 1, max_bytes, out);
      }
      if (indent != nullptr) newline(level);
      *out += '}';
      return;
    }
    default:
      Fail("Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

size_t Utf8Length(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  size_t n = 1;
  if (lead >= 0xF0 && lead < 0xF8) {
    n = 4;
  } else if (lead >= 0xE0) {
    n = lead < 0xF0 ? 3 : 1;
  } else if (lead >= 0xC0) {
    n = 2;
  }
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size(); i += Utf8Length(s, i)) offsets.push_back(i);
  offsets.push_back(s.size());
  return offsets;
}

bool IsPySpaceAt(std::string_view s, size_t i, size_t* length) {
  return IsPySpace(CodePointAt(s, i, length));
}

std::string_view PyStrip(std::string_view s, bool left, bool right) {
  size_t n = 0;
  if (left) {
    while (!s.empty() && IsPySpaceAt(s, 0, &n)) s.remove_prefix(n);
  }
  if (right) {
    while (!s.empty()) {
      // Step back to the start of the last code point.
      size_t start = s.size() - 1;
      while (start > 0 && s.size() - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
        --start;
      }
      if (start + Utf8Length(s, start) != s.size()) start = s.size() - 1;
      if (!IsPySpaceAt(s, start, &n)) break;
      s.remove_suffix(s.size() - start);
    }
  }
  return s;
}

std::string_view PyStripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<std::string_view> set;
  for (size_t i = 0; i < chars.size(); i += Utf8Length(chars, i)) {
    set.push_back(chars.substr(i, Utf8Length(chars, i)));
  }
  const auto in_set = [&](std::string_view cp) {
    for (auto c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  if (left) {
    while (!s.empty() && in_set(s.substr(0, Utf8Length(s, 0)))) s.remove_prefix(Utf8Length(s, 0));
  }
  if (right) {
    while (!s.empty()) {
      const std::vector<size_t> offsets =
          CodePointOffsets(s.substr(s.size() > 4 ? s.size() - 4 : 0));
      const size_t base = s.size() > 4 ? s.size() - 4 : 0;
      const size_t start = base + offsets[offsets.size() - 2];
      if (!in_set(s.substr(start))) break;
      s.remove_suffix(s.size() - start);
    }
  }
  return s;
}

std::vector<std::string> PySplitWhitespace(std::string_view s, int maxsplit) {
  std::vector<std::string> parts;
  size_t i = 0;
  size_t n = 0;
  while (i < s.size()) {
    while (i < s.size() && IsPySpaceAt(s, i, &n)) i += n;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int>(parts.size()) == maxsplit) {
      parts.emplace_back(PyStrip(s.substr(i), false, true));
      break;
    }
    const size_t start = i;
    while (i < s.size() && !IsPySpaceAt(s, i, &n)) i += n;
    parts.emplace_back(s.substr(start, i - start));
  }
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    const uint32_t cp = CodePointAt(s, i, &n);
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                          (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) {
      i += n;
      continue;
    }
    lines.emplace_back(s.substr(start, i - start));
    i += n;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Pairs where the upper-case letter is at an even (odd_upper: odd) code
// point and its lower-case letter right after it.
bool InPairRange(uint32_t cp, uint32_t first, uint32_t last) { return cp >= first && cp <= last; }

// The lower-case form of `cp`, or cp itself; 0x130 is handled by the caller.
uint32_t LowerOf(uint32_t cp) {
  if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  const bool even = cp % 2 == 0;
  if ((InPairRange(cp, 0x100, 0x12F) || InPairRange(cp, 0x132, 0x137) ||
       InPairRange(cp, 0x14A, 0x177) || InPairRange(cp, 0x460, 0x481) ||
       InPairRange(cp, 0x48A, 0x4BF)) &&
      even) {
    return cp + 1;
  }
  if ((InPairRange(cp, 0x139, 0x148) || InPairRange(cp, 0x179, 0x17E)) && !even) return cp + 1;
  if (cp == 0x178) return 0xFF;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if ((cp >= 0x391 && cp <= 0x3A1) || (cp >= 0x3A3 && cp <= 0x3AB)) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  return cp;
}

uint32_t UpperOf(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  const bool even = cp % 2 == 0;
  if ((InPairRange(cp, 0x101, 0x12F) || InPairRange(cp, 0x133, 0x137) ||
       InPairRange(cp, 0x14B, 0x177) || InPairRange(cp, 0x461, 0x481) ||
       InPairRange(cp, 0x48B, 0x4BF)) &&
      !even) {
    return cp - 1;
  }
  if ((InPairRange(cp, 0x13A, 0x148) || InPairRange(cp, 0x17A, 0x17E)) && even) return cp - 1;
  switch (cp) {
    case 0xFF:
      return 0x178;
    case 0xB5:
      return 0x39C;
    case 0x131:
      return 'I';
    case 0x17F:
      return 'S';
    case 0x3C2:
      return 0x3A3;
    case 0x3AC:
      return 0x386;
    case 0x3CC:
      return 0x38C;
    case 0x3CD:
      return 0x38E;
    case 0x3CE:
      return 0x38F;
    default:
      break;
  }
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if ((cp >= 0x3B1 && cp <= 0x3C1) || (cp >= 0x3C3 && cp <= 0x3CB)) return cp - 32;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

}  // namespace

std::string PyLower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = CodePointAt(s, i, &n);
    if (n == 1 && cp >= 0x80) {
      out += s[i];  // an invalid byte stays as it is
    } else if (cp == 0x130) {
      out += "i\xCC\x87";  // İ -> i + COMBINING DOT ABOVE
    } else {
      AppendCodePoint(LowerOf(cp), &out);
    }
    i += n;
  }
  return out;
}

std::string PyUpper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = CodePointAt(s, i, &n);
    if (n == 1 && cp >= 0x80) {
      out += s[i];
    } else if (cp == 0xDF) {
      out += "SS";
    } else if (cp == 0x149) {
      out += "\xCA\xBCN";  // ŉ -> ʼN
    } else {
      AppendCodePoint(UpperOf(cp), &out);
    }
    i += n;
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8Length(s, i);
    size_t len = 0;
    const uint32_t cp = CodePointAt(s, i, &len);
    const std::string_view one = s.substr(i, n);
    const bool cased = LowerOf(cp) != cp || UpperOf(cp) != cp || cp == 0xDF || cp == 0x130;
    out += !cased ? std::string(one) : prev_cased ? PyLower(one) : PyUpper(one);
    prev_cased = cased;
    i += n;
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return "";
  const size_t n = Utf8Length(s, 0);
  return PyUpper(s.substr(0, n)) + PyLower(s.substr(n));
}

std::string PyFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's choice between fixed and
  // scientific notation (repr uses scientific when the decimal point would
  // sit more than 16 digits right or 4 left of the first digit).
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const int decpt = exponent + 1;
  std::string out = sign;
  if (decpt > 16 || decpt <= -4) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
  if (static_cast<size_t>(decpt) >= digits.size()) {
    return out + digits + std::string(decpt - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

namespace {

std::string Str(const Value& value, int depth);

std::string Repr(const Value& value, int depth) {
  if (value.is_string()) return ReprString(value.str());
  return Str(value, depth);
}

std::string Str(const Value& value, int depth) {
  using K = Value::Kind;
  // Lists and dicts are at most kMaxValueDepth deep, but a namespace may
  // hold itself.
  if (depth > kMaxValueDepth) {
    FailLimit("a value nested more than " + std::to_string(kMaxValueDepth) + " deep to print");
  }
  switch (value.kind()) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return value.boolean() ? "True" : "False";
    case K::kInt:
      return std::to_string(value.integer());
    case K::kFloat:
      return PyFloat(value.number());
    case K::kString:
      return value.str();
    case K::kList: {
      const List& list = value.list();
      if (list.generator) return "<generator object>";
      std::string out = list.tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += Repr(list.items[i], depth + 1);
      }
      if (list.tuple && list.items.size() == 1) out += ",";
      return out + (list.tuple ? ")" : "]");
    }
    case K::kDict:
    case K::kNamespace: {
      std::string out = value.kind() == K::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : value.dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(key) + ": " + Repr(item, depth + 1);
      }
      return out + (value.kind() == K::kNamespace ? "}>" : "}");
    }
    case K::kCallable:
      return "<function " + value.callable().name + ">";
  }
  return "";
}

}  // namespace

std::string PyRepr(const Value& value) { return Repr(value, 0); }

std::string PyStr(const Value& value) { return Str(value, 0); }

std::string JsonDumps(const Value& value, const std::string* indent, size_t max_bytes) {
  std::string out;
  Dump(value, indent, 0, max_bytes, &out);
  if (out.size() > max_bytes)
    FailLimit("tojson output exceeds " + std::to_string(max_bytes) + " bytes");
  return out;
}

}  // namespace dikkat::chat
