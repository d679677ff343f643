// jinja2's tests (`value is name(args)`), as jinja2 3.1 defines them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/builtins.h"
#include "model/chat/interpreter.h"
#include "model/chat/python_text.h"

namespace dikkat::chat {

bool Interpreter::ApplyTest(const std::string& name, const Value& v, const Args& args) {
  Step();
  using K = Value::Kind;
  const Value* arg = args.Get(0, "other");
  const auto need_arg = [&]() -> const Value& {
    if (arg == nullptr) Fail("test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.boolean();
  if (name == "false") return v.kind() == K::kBool && !v.boolean();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "iterable") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "sequence") {
    return v.is_undefined() || v.is_string() || (v.is_list() && !v.list().generator) || v.is_dict();
  }
  if (name == "equalto" || name == "eq" || name == "==") return Equals(v, need_arg());
  if (name == "ne" || name == "!=") return !Equals(v, need_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return Less(v, need_arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(need_arg(), v);
  if (name == "le" || name == "<=") return !Less(need_arg(), v);
  if (name == "ge" || name == ">=") return !Less(v, need_arg());
  if (name == "sameas") {
    const Value& o = need_arg();
    if (v.kind() != o.kind()) return false;
    // Python's `is`: None, the two bools and CPython's cached small ints are
    // the same object wherever they come from; other values are not known.
    if (v.kind() == K::kInt)
      return v.integer() == o.integer() && v.integer() >= -5 && v.integer() <= 256;
    return v.is_none() || v.is_undefined() || (v.kind() == K::kBool && v.boolean() == o.boolean());
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != K::kInt && v.kind() != K::kBool) Fail("test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      const int64_t d = IntArg(&need_arg(), 1, "divisibleby");
      if (d == 0) Fail("integer division or modulo by zero");
      if (d == -1) return true;  // (INT64_MIN % -1 would trap)
      return v.integer() % d == 0;
    }
    return (v.integer() % 2 != 0) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return StringMethod(*this, v.str(), name == "lower" ? "islower" : "isupper", {}).boolean();
  }
  if (name == "in") {
    const Value& container = need_arg();
    switch (container.kind()) {
      case K::kUndefined:
        return false;
      case K::kString:
        if (!v.is_string()) {
          Fail("'in <string>' requires string as left operand, not " + v.TypeName());
        }
        return container.str().find(v.str()) != std::string::npos;
      case K::kList:
        for (const Value& item : container.list().items) {
          Step();
          if (Equals(item, v)) return true;
        }
        return false;
      case K::kDict:
        return v.is_string() && container.dict().Find(v.str()) != nullptr;
      default:
        Fail("argument of type '" + container.TypeName() + "' is not iterable");
    }
  }
  Fail("no test named '" + name + "'");
}

}  // namespace dikkat::chat
