// Template source -> tokens, with jinja2's whitespace rules as Hugging Face
// configures them (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False):
//  - newlines are normalised to "\n" and one trailing newline is dropped;
//  - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}`
//    / `-#}` all whitespace after it;
//  - lstrip_blocks: spaces and tabs between a line's start and `{%` or `{#`
//    are removed (not before `{{`; `{%+` keeps them);
//  - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}`
//    keeps it);
//  - inside a tag, `}}` / `%}` only end it outside brackets, as in jinja2.
// Comments produce no token.
#ifndef DIKKAT_MODEL_CHAT_LEXER_H_
#define DIKKAT_MODEL_CHAT_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dikkat::chat {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Type type = Type::kEnd;
  std::string value;  // text, name, decoded string literal or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Throws TemplateError (with line and column in the message) on unterminated
// tags, comments or strings and on characters no token starts with.
std::vector<Token> Lex(std::string_view source);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_LEXER_H_
