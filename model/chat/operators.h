// The arithmetic operators of templates with Python's semantics: + - * / //
// % ** on ints (64-bit; overflow fails), floats and bools, + on strings,
// lists and tuples, * repeating a string or list. `and`, `or` and `~` are the
// interpreter's (they short-circuit / take any value).
#ifndef DIKKAT_MODEL_CHAT_OPERATORS_H_
#define DIKKAT_MODEL_CHAT_OPERATORS_H_

#include <string>

#include "model/chat/interpreter.h"
#include "model/chat/value.h"

namespace dikkat::chat {

// Fails (TemplateError) where Python raises, e.g. 'a' + 1, 1 / 0, and on an
// undefined operand.
Value BinaryOperator(Interpreter& in, const std::string& op, const Value& a, const Value& b);
// Unary - and + on numbers.
Value UnaryOperator(const std::string& op, const Value& v);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_OPERATORS_H_
