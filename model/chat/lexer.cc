#include "model/chat/lexer.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "model/chat/python_text.h"
#include "model/chat/value.h"

namespace dikkat::chat {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    bool strip_leading = false;
    while (pos <= src_.size()) {
      if (strip_leading) {
        const size_t before = pos;
        pos = src_.size() - PyStrip(std::string_view(src_).substr(pos), true, false).size();
        if (pos > before) line_starting = src_[pos - 1] == '\n';
        strip_leading = false;
      }
      const size_t open = FindOpener(pos);
      std::string text = src_.substr(pos, open - pos);
      if (open == src_.size()) {
        Emit(Token::Type::kText, std::move(text), pos);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        text = std::string(PyStrip(text, false, true));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line's start and the tag.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            PyStrip(std::string_view(text).substr(line_start), true, false).empty()) {
          text.resize(line_start);
        }
      }
      Emit(Token::Type::kText, std::move(text), pos);
      size_t inner = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      char end_sign = '\0';
      if (kind == '#') {
        const size_t close = src_.find("#}", inner);
        if (close == std::string::npos) Error(open, "unterminated comment");
        if (close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+')) {
          end_sign = src_[close - 1];
        }
        pos = close + 2;
      } else {
        pos = LexTag(kind == '{', open, inner, &end_sign);
      }
      line_starting = false;
      if (end_sign == '-') {
        strip_leading = true;
      } else if (end_sign != '+' && kind != '{' && pos < src_.size() && src_[pos] == '\n') {
        ++pos;  // trim_blocks
        line_starting = true;
      }
    }
    Token end;
    end.type = Token::Type::kEnd;
    SetPosition(&end, src_.size());
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  size_t FindOpener(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void SetPosition(Token* token, size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    token->line = static_cast<int>(it - line_starts_.begin());
    token->column = static_cast<int>(offset - *(it - 1)) + 1;
  }

 public:
  void IndexLines() {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

 private:
  [[noreturn]] void Error(size_t offset, const std::string& message) const {
    Token where;
    SetPosition(&where, offset);
    throw TemplateError{TemplateError::Kind::kInvalid,
                        "line " + std::to_string(where.line) + ", column " +
                            std::to_string(where.column) + ": " + message,
                        where.line};
  }

  void Emit(Token::Type type, std::string value, size_t offset) {
    if (type == Token::Type::kText && value.empty()) return;
    Token token;
    token.type = type;
    token.value = std::move(value);
    SetPosition(&token, offset);
    tokens_.push_back(std::move(token));
  }

  // Lexes the inside of `{{ ... }}` or `{% ... %}` from `pos`; returns the
  // offset after the closing delimiter.
  size_t LexTag(bool variable, size_t open, size_t pos, char* end_sign) {
    Emit(variable ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", open);
    const char closer = variable ? '}' : '%';
    std::string brackets;
    while (true) {
      while (pos < src_.size()) {
        size_t n = 0;
        if (!IsPySpaceAt(src_, pos, &n)) break;
        pos += n;
      }
      if (pos >= src_.size()) Error(open, variable ? "unterminated '{{'" : "unterminated '{%'");
      if (brackets.empty()) {
        for (const char sign : {'-', '+', '\0'}) {
          if (sign == '+' && variable) continue;
          const size_t at = pos + (sign != '\0' ? 1 : 0);
          if ((sign == '\0' || src_[pos] == sign) && at + 1 < src_.size() && src_[at] == closer &&
              src_[at + 1] == '}') {
            Emit(variable ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", pos);
            *end_sign = sign;
            return at + 2;
          }
        }
      }
      pos = LexToken(pos, &brackets);
    }
  }

  size_t LexToken(size_t pos, std::string* brackets) {
    const char c = src_[pos];
    if (IsNameStart(c)) {
      size_t end = pos;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Emit(Token::Type::kName, src_.substr(pos, end - pos), pos);
      return end;
    }
    if (IsDigit(c)) return LexNumber(pos);
    if (c == '\'' || c == '"') return LexString(pos);
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                       "/",  "%",  "~",  "(",  ")",  "[",  "]", "{", "}",
                                       ",",  ".",  ":",  "|",  "=",  "<",  ">", ";"};
    for (const char* op : kOps) {
      const std::string_view view(op);
      if (src_.compare(pos, view.size(), view) != 0) continue;
      if (view == "(" || view == "[" || view == "{") brackets->push_back(c);
      if (view == ")" || view == "]" || view == "}") {
        const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (brackets->empty() || brackets->back() != want) {
          Error(pos, std::string("unexpected '") + c + "'");
        }
        brackets->pop_back();
      }
      Emit(Token::Type::kOp, std::string(view), pos);
      return pos + view.size();
    }
    Error(pos, std::string("unexpected character '") + c + "'");
  }

  size_t LexNumber(size_t pos) {
    const auto digits = [&](size_t p) {
      while (p < src_.size() && (IsDigit(src_[p]) ||
                                 (src_[p] == '_' && p + 1 < src_.size() && IsDigit(src_[p + 1])))) {
        ++p;
      }
      return p;
    };
    size_t end = digits(pos);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && IsDigit(src_[end + 1])) {
      is_float = true;
      end = digits(end + 1);
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t p = end + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        is_float = true;
        end = digits(p);
      }
    }
    std::string text = src_.substr(pos, end - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token token;
    SetPosition(&token, pos);
    token.value = text;
    if (is_float) {
      token.type = Token::Type::kFloat;
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      token.type = Token::Type::kInt;
      errno = 0;
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) Error(pos, "integer literal out of range: " + text);
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
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

  // Python's string-literal escapes (jinja2 decodes with "unicode-escape");
  // unknown escapes such as "\d" stay as written.
  size_t LexString(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) Error(pos, "unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) Error(pos, "unterminated string");
      const char e = src_[p + 1];
      p += 2;
      const auto hex = [&](int count) {
        if (p + count > src_.size()) Error(p, "truncated \\x/\\u escape");
        uint32_t cp = 0;
        for (int k = 0; k < count; ++k) {
          const char h = src_[p + k];
          const int d = IsDigit(h)               ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (d < 0) Error(p, "truncated \\x/\\u escape");
          cp = cp * 16 + static_cast<uint32_t>(d);
        }
        p += count;
        if (cp > 0x10FFFF) Error(p, "illegal Unicode character in escape");
        AppendUtf8(cp, &value);
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    Token token;
    token.type = Token::Type::kString;
    token.value = std::move(value);
    SetPosition(&token, pos);
    tokens_.push_back(std::move(token));
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) {
  // jinja2 splits on \r\n, \r and \n, rejoins with \n, and (without
  // keep_trailing_newline) drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  Lexer lexer(std::move(normalized));
  lexer.IndexLines();
  return lexer.Run();
}

}  // namespace dikkat::chat
