// Helpers shared by the built-ins (methods.cc, filters.cc, jinja_tests.cc);
// internal to model/chat. Each throws TemplateError where Python raises.
#ifndef DIKKAT_MODEL_CHAT_BUILTINS_H_
#define DIKKAT_MODEL_CHAT_BUILTINS_H_

#include <cstdint>
#include <string>

#include "model/chat/interpreter.h"
#include "model/chat/value.h"

namespace dikkat::chat {

// The argument as a string / an integer (null or None: `dflt`); else fails
// naming `what`.
const std::string& StringArg(const Value* v, const char* what);
int64_t IntArg(const Value* v, int64_t dflt, const char* what);

// str.replace with Python's semantics (an empty `old` inserts between code
// points; count < 0: all); the result size is charged before it is built.
std::string Replace(Interpreter& in, const std::string& s, const std::string& old,
                    const std::string& with, int64_t count);

// s.name(args) for the str methods templates use; fails on others.
Value StringMethod(Interpreter& in, const std::string& s, const std::string& name,
                   const Args& args);
// d.name(args) for items, keys, values, get, copy; methods that modify fail.
Value DictMethod(Interpreter& in, const Value& self, const std::string& name, const Args& args);

// jinja2's make_attrgetter: "a.b.0" looked up item by item (integer parts
// index), as selectattr / map(attribute=) / join(attribute=) do.
Value AttributeOf(Interpreter& in, const Value& item, const std::string& path);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_BUILTINS_H_
