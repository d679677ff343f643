// Tokens -> syntax tree, with jinja2's grammar and operator precedence (low
// to high): `x if c else y`; or; and; not; comparisons and `in` / `not in`
// (chained as in Python); + -; ~; * / // %; **; unary - +; then a primary
// with its postfixes (.attr, [index], [a:b:c], call) and its filters / tests
// (`|f`, `is t`), which bind tighter than any binary operator:
// `a + b | trim` is `a + (b | trim)`, `not x is defined` is `not (x is defined)`.
#ifndef DIKKAT_MODEL_CHAT_PARSER_H_
#define DIKKAT_MODEL_CHAT_PARSER_H_

#include <vector>

#include "model/chat/ast.h"
#include "model/chat/lexer.h"

namespace dikkat::chat {

// Nesting of blocks and sub-expressions the parser accepts (it recurses, and
// the input is untrusted). Real templates nest fewer than 10 levels.
inline constexpr int kMaxParseDepth = 100;

// Throws TemplateError with "line L, column C: ..." on a syntax error.
Body Parse(const std::vector<Token>& tokens);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_PARSER_H_
