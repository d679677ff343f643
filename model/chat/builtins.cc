// The built-in vocabulary of the interpreter: attribute and item access,
// the methods templates call on strings and dicts, jinja2's filters and
// tests, and the globals Hugging Face provides (raise_exception,
// strftime_now) next to jinja2's (namespace, range, dict). Each follows
// jinja2 3.1 / Python 3 behaviour, including where it raises.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/interpreter.h"
#include "model/chat/python_text.h"

namespace dikkat::chat {
namespace {

bool IsOneOf(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

// Python attributes that are methods, per receiver type. Attribute access on
// a dict finds these before its keys (`d.items` is the method), as jinja2's
// getattr-then-getitem does.
bool IsStringMethod(const std::string& name) {
  return IsOneOf(
      name, {"strip",     "lstrip",  "rstrip",       "split",        "rsplit",     "startswith",
             "endswith",  "upper",   "lower",        "replace",      "title",      "capitalize",
             "find",      "rfind",   "count",        "join",         "splitlines", "isdigit",
             "isalpha",   "isalnum", "isspace",      "isupper",      "islower",    "index",
             "format",    "encode",  "removeprefix", "removesuffix", "zfill",      "center",
             "ljust",     "rjust",   "swapcase",     "casefold",     "partition",  "rpartition",
             "expandtabs"});
}
bool IsDictMethod(const std::string& name) {
  return IsOneOf(name, {"items", "keys", "values", "get", "copy", "pop", "popitem", "update",
                        "clear", "setdefault", "fromkeys"});
}
bool IsListMethod(const std::string& name) {
  return IsOneOf(name, {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                        "copy", "index", "count"});
}

Value BoundMethod(const Value& self, const std::string& name) {
  Callable c;
  c.type = Callable::Type::kMethod;
  c.name = name;
  c.self = std::make_shared<const Value>(self);
  return Value::MakeCallable(std::move(c));
}

const std::string& StringArg(const Value* v, const char* what) {
  if (v == nullptr || !v->is_string()) {
    Fail(std::string(what) + " must be a string, got " +
         (v == nullptr ? std::string("nothing") : v->TypeName()));
  }
  return v->str();
}

int64_t IntArg(const Value* v, int64_t dflt, const char* what) {
  if (v == nullptr || v->is_none()) return dflt;
  if (v->kind() != Value::Kind::kInt && v->kind() != Value::Kind::kBool) {
    Fail(std::string(what) + " must be an integer, got " + v->TypeName());
  }
  return v->integer();
}

// str.replace with Python's semantics (an empty `old` inserts between code
// points); the result size is checked before it is built.
std::string Replace(Interpreter& in, const std::string& s, const std::string& old,
                    const std::string& with, int64_t count) {
  std::vector<size_t> at;
  if (old.empty()) {
    at = CodePointOffsets(s);
  } else {
    for (size_t p = s.find(old); p != std::string::npos; p = s.find(old, p + old.size())) {
      at.push_back(p);
      in.Step();
    }
  }
  if (count >= 0 && at.size() > static_cast<size_t>(count)) at.resize(count);
  const double size = static_cast<double>(s.size()) +
                      static_cast<double>(at.size()) *
                          (static_cast<double>(with.size()) - static_cast<double>(old.size()));
  in.Charge(size > 1e18 ? static_cast<size_t>(-1) / 2 : static_cast<size_t>(std::max(0.0, size)));
  std::string out;
  size_t prev = 0;
  for (size_t p : at) {
    out.append(s, prev, p - prev);
    out += with;
    prev = p + old.size();
  }
  out.append(s, std::min(prev, s.size()), std::string::npos);
  return out;
}

std::vector<std::string> Split(Interpreter& in, const std::string& s, const Value* sep,
                               int64_t maxsplit) {
  if (sep == nullptr || sep->is_none()) return PySplitWhitespace(s, static_cast<int>(maxsplit));
  const std::string& d = StringArg(sep, "split separator");
  if (d.empty()) Fail("empty separator");
  std::vector<std::string> parts;
  size_t prev = 0;
  for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, prev)) {
    in.Step();
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    parts.push_back(s.substr(prev, p - prev));
    prev = p + d.size();
  }
  parts.push_back(s.substr(prev));
  return parts;
}

Value StringMethod(Interpreter& in, const std::string& s, const std::string& name,
                   const Args& args) {
  const auto str_list = [&](std::vector<std::string> parts) {
    std::vector<Value> items;
    size_t bytes = 0;
    for (auto& p : parts) {
      bytes += p.size();
      items.push_back(Value::Str(std::move(p)));
    }
    in.Charge(bytes);
    return in.MakeList(std::move(items));
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    args.Check(name.c_str(), 1, {});
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    const Value* chars = args.Get(0, "chars");
    if (chars == nullptr || chars->is_none())
      return in.MakeString(std::string(PyStrip(s, left, right)));
    return in.MakeString(std::string(PyStripChars(s, StringArg(chars, "chars"), left, right)));
  }
  if (name == "split") {
    args.Check("split", 2, {"sep", "maxsplit"});
    return str_list(
        Split(in, s, args.Get(0, "sep"), IntArg(args.Get(1, "maxsplit"), -1, "maxsplit")));
  }
  if (name == "splitlines") return str_list(PySplitLines(s));
  if (name == "startswith" || name == "endswith") {
    args.Check(name.c_str(), 1, {});
    const Value* arg = args.Get(0, "prefix");
    std::vector<Value> options;
    if (arg != nullptr && arg->is_list() && arg->list().tuple) {
      options = arg->list().items;
    } else if (arg != nullptr) {
      options.push_back(*arg);
    }
    if (options.empty() && arg == nullptr) Fail(name + "() takes at least 1 argument");
    for (const Value& o : options) {
      const std::string& p = StringArg(&o, name.c_str());
      if (p.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, p.size(), p) == 0
                               : s.compare(s.size() - p.size(), p.size(), p) == 0) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "upper") return in.MakeString(PyUpper(s));
  if (name == "lower" || name == "casefold") return in.MakeString(PyLower(s));
  if (name == "replace") {
    args.Check("replace", 3, {});
    return in.MakeString(Replace(in, s, StringArg(args.Get(0, ""), "replace() argument 1"),
                                 StringArg(args.Get(1, ""), "replace() argument 2"),
                                 IntArg(args.Get(2, ""), -1, "count")));
  }
  if (name == "capitalize") return in.MakeString(PyCapitalize(s));
  if (name == "title") return in.MakeString(PyTitle(s));
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const std::string& sub = StringArg(args.Get(0, "sub"), name.c_str());
    if (name == "count") {
      int64_t n = 0;
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointOffsets(s).size()));
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") Fail("substring not found");
      return Value::Int(-1);
    }
    // Python counts code points.
    return Value::Int(static_cast<int64_t>(CodePointOffsets(s.substr(0, p)).size()) - 1);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : in.Iterate(*args.Get(0, "iterable"))) {
      if (!v.is_string()) Fail("join() expects strings, got " + v.TypeName());
      if (!first) out += s;
      first = false;
      out += v.str();
      if (out.size() > in.max_value_bytes()) in.Charge(out.size());  // fails
    }
    return in.MakeString(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    if (s.empty()) return Value::Bool(false);
    bool all = true;
    bool cased = false;
    for (char c : s) {
      const bool digit = c >= '0' && c <= '9';
      const bool lower = c >= 'a' && c <= 'z';
      const bool upper = c >= 'A' && c <= 'Z';
      cased = cased || lower || upper;
      if (name == "isdigit") all = all && digit;
      if (name == "isalpha") all = all && (lower || upper);
      if (name == "isalnum") all = all && (lower || upper || digit);
      if (name == "isspace") all = all && (c == ' ' || (c >= '\t' && c <= '\r'));
      if (name == "isupper") all = all && !lower;
      if (name == "islower") all = all && !upper;
    }
    if (name == "isupper" || name == "islower") all = all && cased;
    return Value::Bool(all);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& p = StringArg(args.Get(0, "affix"), name.c_str());
    if (p.size() <= s.size()) {
      if (name == "removeprefix" && s.compare(0, p.size(), p) == 0) {
        return in.MakeString(s.substr(p.size()));
      }
      if (name == "removesuffix" && s.compare(s.size() - p.size(), p.size(), p) == 0) {
        return in.MakeString(s.substr(0, s.size() - p.size()));
      }
    }
    return Value::Str(s);
  }
  Fail("str." + name + "() is not supported");
}

Value DictMethod(Interpreter& in, const Value& self, const std::string& name, const Args& args) {
  const Dict& d = self.dict();
  if (name == "items") {
    args.Check("items", 0, {});
    std::vector<Value> items;
    for (const auto& [key, value] : d.entries) {
      items.push_back(Value::MakeList({Value::Str(key), value}, /*tuple=*/true));
    }
    return in.MakeList(std::move(items));
  }
  if (name == "keys" || name == "values") {
    args.Check(name.c_str(), 0, {});
    std::vector<Value> items;
    for (const auto& [key, value] : d.entries) {
      items.push_back(name == "keys" ? Value::Str(key) : value);
    }
    return in.MakeList(std::move(items));
  }
  if (name == "get") {
    args.Check("get", 2, {});
    const Value* key = args.Get(0, "key");
    if (key == nullptr) Fail("get expected at least 1 argument, got 0");
    const Value* found = key->is_string() ? d.Find(key->str()) : nullptr;
    if (found != nullptr) return *found;
    const Value* dflt = args.Get(1, "default");
    return dflt != nullptr ? *dflt : Value::None();
  }
  if (name == "copy") return self;
  Fail("dict." + name + "() is not allowed: templates cannot modify values");
}

Value Global(Interpreter& in, const std::string& name, const Args& args) {
  if (name == "raise_exception") {
    const Value* msg = args.Get(0, "message");
    throw TemplateError{TemplateError::Kind::kRaised, msg == nullptr ? "" : PyStr(*msg), 0};
  }
  if (name == "namespace" || name == "dict") {
    Dict attributes;
    if (!args.positional.empty()) {
      if (args.positional.size() > 1 || !args.positional[0].is_dict()) {
        Fail(name + "() takes one mapping or keyword arguments");
      }
      attributes = args.positional[0].dict();
    }
    for (const auto& [key, value] : args.named) attributes.Set(key, value);
    in.ChargeSlots(attributes.entries.size());
    if (name == "dict") return Value::MakeDict(std::move(attributes));
    Value ns = Value::MakeNamespace(std::move(attributes));
    in.Track(ns);
    return ns;
  }
  if (name == "range") {
    args.Check("range", 3, {});
    if (args.positional.empty()) Fail("range expected at least 1 argument, got 0");
    int64_t start = 0;
    int64_t stop = IntArg(&args.positional[0], 0, "range() argument");
    int64_t step = 1;
    if (args.positional.size() >= 2) {
      start = stop;
      stop = IntArg(&args.positional[1], 0, "range() argument");
    }
    if (args.positional.size() == 3) step = IntArg(&args.positional[2], 1, "range() argument");
    if (step == 0) Fail("range() arg 3 must not be zero");
    // Counted in unsigned arithmetic: no range of int64 values overflows it.
    const uint64_t ustart = static_cast<uint64_t>(start);
    const uint64_t ustop = static_cast<uint64_t>(stop);
    uint64_t count = 0;
    if (step > 0 && start < stop) {
      count = (ustop - ustart - 1) / static_cast<uint64_t>(step) + 1;
    } else if (step < 0 && start > stop) {
      count = (ustart - ustop - 1) / (0 - static_cast<uint64_t>(step)) + 1;
    }
    in.ChargeSlots(static_cast<size_t>(std::min<uint64_t>(count, SIZE_MAX / 2)));
    std::vector<Value> items;
    items.reserve(count);
    for (uint64_t k = 0; k < count; ++k) {
      items.push_back(Value::Int(static_cast<int64_t>(ustart + k * static_cast<uint64_t>(step))));
    }
    return Value::MakeList(std::move(items));
  }
  if (name == "strftime_now") {
    const std::string& format = StringArg(args.Get(0, "format"), "strftime_now format");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
    return in.MakeString(std::string(buf, n));
  }
  Fail("'" + name + "' is not callable");
}

Value AttributeOf(Interpreter& in, const Value& item, const std::string& path) {
  // jinja2's make_attrgetter: dotted path, integer parts index.
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    v = in.GetItem(v, digits ? Value::Int(std::atoll(part.c_str())) : Value::Str(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string Indent(Interpreter& in, const std::string& s, const Value* width, bool first,
                   bool blank) {
  std::string indention;
  if (width != nullptr && width->is_string()) {
    indention = width->str();
  } else {
    const int64_t n = IntArg(width, 4, "indent width");
    in.Charge(static_cast<size_t>(std::max<int64_t>(0, n)));
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  // jinja2 appends "\n" before splitlines() (so a trailing newline does not
  // produce an indented empty line), then joins with "\n".
  const std::vector<std::string> lines = PySplitLines(s + "\n");
  in.Charge(s.size() + lines.size() * (indention.size() + 1));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
  }
  if (first) out = indention + out;
  return out;
}

}  // namespace

Value Interpreter::CallGlobal(const std::string& name, const Args& args) {
  Step();
  return Global(*this, name, args);
}

Value Interpreter::GetAttr(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      Fail("cannot read attribute '" + name + "' of an undefined value");
    case Value::Kind::kDict: {
      if (IsDictMethod(name)) return BoundMethod(object, name);
      const Value* v = object.dict().Find(name);
      return v != nullptr ? *v : Value();
    }
    case Value::Kind::kNamespace: {
      const Value* v = object.dict().Find(name);
      return v != nullptr ? *v : Value();
    }
    case Value::Kind::kString:
      return IsStringMethod(name) ? BoundMethod(object, name) : Value();
    case Value::Kind::kList:
      return IsListMethod(name) && !object.list().generator ? BoundMethod(object, name) : Value();
    default:
      return Value();
  }
}

Value Interpreter::GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      Fail("cannot index an undefined value");
    case Value::Kind::kDict:
      if (key.is_string()) {
        const Value* v = object.dict().Find(key.str());
        if (v != nullptr) return *v;
      }
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool) {
        if (object.is_list() && object.list().generator) break;
        std::vector<size_t> offsets;
        int64_t length = 0;
        if (object.is_string()) {
          offsets = CodePointOffsets(object.str());
          length = static_cast<int64_t>(offsets.size()) - 1;
        } else {
          length = static_cast<int64_t>(object.list().items.size());
        }
        int64_t i = key.integer();
        if (i < 0) i += length;
        if (i < 0 || i >= length) return Value();
        if (object.is_list()) return object.list().items[i];
        return MakeString(object.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      break;
    default:
      break;
  }
  // jinja2 falls back to the attribute of that name.
  if (key.is_string()) return GetAttr(object, key.str());
  return Value();
}

Value Interpreter::CallMethod(const Value& self, const std::string& name, const Args& args) {
  Step();
  switch (self.kind()) {
    case Value::Kind::kUndefined:
      Fail("cannot call '" + name + "' of an undefined value");
    case Value::Kind::kString:
      if (IsStringMethod(name)) return StringMethod(*this, self.str(), name, args);
      break;
    case Value::Kind::kDict:
      if (IsDictMethod(name)) return DictMethod(*this, self, name, args);
      return Call(GetAttr(self, name), args);
    case Value::Kind::kNamespace:
      return Call(GetAttr(self, name), args);
    case Value::Kind::kList:
      if (IsListMethod(name) && !self.list().generator) {
        if (name == "count" || name == "index") {
          const Value* x = args.Get(0, "value");
          if (x == nullptr) Fail("list." + name + "() takes exactly one argument");
          int64_t n = 0;
          for (size_t i = 0; i < self.list().items.size(); ++i) {
            if (!Equals(self.list().items[i], *x)) continue;
            if (name == "index") return Value::Int(static_cast<int64_t>(i));
            ++n;
          }
          if (name == "index") Fail("value is not in list");
          return Value::Int(n);
        }
        if (name == "copy") return self;
        Fail("list." + name + "() is not allowed: templates cannot modify values");
      }
      break;
    default:
      break;
  }
  Fail("an undefined value is not callable ('" + self.TypeName() + "' object has no method '" +
       name + "')");
}

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

Value Interpreter::ApplyFilter(const std::string& name, const Value& v, const Args& args) {
  Step();
  using K = Value::Kind;
  const auto as_text = [&]() { return v.is_string() ? v.str() : PyStr(v); };
  if (name == "safe") return v.is_string() ? Value::Markup(v.str()) : Value::Markup(PyStr(v));
  if (name == "trim") {
    args.Check("trim", 1, {"chars"});
    const Value* chars = args.Get(0, "chars");
    const std::string s = as_text();
    if (chars == nullptr || chars->is_none())
      return MakeString(std::string(PyStrip(s, true, true)));
    return MakeString(std::string(PyStripChars(s, StringArg(chars, "chars"), true, true)));
  }
  if (name == "string") return v.is_string() ? v : MakeString(as_text());
  if (name == "upper") return MakeString(PyUpper(as_text()));
  if (name == "lower") return MakeString(PyLower(as_text()));
  if (name == "capitalize") return StringMethod(*this, as_text(), "capitalize", {});
  if (name == "title") {
    // jinja2's do_title: the text split after runs of "-", whitespace, "(",
    // "{", "[", "<"; each piece's first code point upped, the rest lowered.
    const std::string text = as_text();
    std::string out;
    size_t piece = 0;
    const auto flush = [&](size_t end) {
      if (end > piece) out += PyCapitalize(std::string_view(text).substr(piece, end - piece));
    };
    for (size_t i = 0; i < text.size();) {
      size_t n = 0;
      const bool sep = IsPySpaceAt(text, i, &n) || text[i] == '-' || text[i] == '(' ||
                       text[i] == '{' || text[i] == '[' || text[i] == '<';
      if (sep) {
        flush(i);
        out.append(text, i, n);
        piece = i + n;
      }
      i += n;
    }
    flush(text.size());
    return MakeString(std::move(out));
  }
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case K::kUndefined:
        return Value::Int(0);
      case K::kString:
        return Value::Int(static_cast<int64_t>(CodePointOffsets(v.str()).size()) - 1);
      case K::kList:
        if (v.list().generator) Fail("object of type 'generator' has no len()");
        return Value::Int(static_cast<int64_t>(v.list().items.size()));
      case K::kDict:
        return Value::Int(static_cast<int64_t>(v.dict().entries.size()));
      default:
        Fail("object of type '" + v.TypeName() + "' has no len()");
    }
  }
  if (name == "tojson") {
    args.Check("tojson", 1, {"indent", "ensure_ascii", "separators", "sort_keys"});
    for (const char* unsupported : {"ensure_ascii", "separators", "sort_keys"}) {
      if (args.Named(unsupported) != nullptr)
        Fail(std::string("tojson(") + unsupported + "=...) is not supported");
    }
    const Value* indent = args.Get(0, "indent");
    std::string unit;
    if (indent != nullptr && indent->is_string()) {
      unit = indent->str();
    } else if (indent != nullptr && !indent->is_none()) {
      const int64_t n = IntArg(indent, 0, "tojson indent");
      Charge(static_cast<size_t>(std::max<int64_t>(0, n)));
      unit.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
    }
    std::string json = JsonDumps(v, indent == nullptr || indent->is_none() ? nullptr : &unit,
                                 limits_.max_output_bytes);
    return MakeString(std::move(json));
  }
  if (name == "default" || name == "d") {
    args.Check(name.c_str(), 2, {"default_value", "boolean"});
    const Value* dflt = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use = boolean != nullptr && boolean->Truthy() ? !v.Truthy() : v.is_undefined();
    if (!use) return v;
    return dflt != nullptr ? *dflt : Value::Str("");
  }
  if (name == "join") {
    args.Check("join", 2, {"d", "attribute"});
    const Value* sep = args.Get(0, "d");
    const Value* attribute = args.Get(1, "attribute");
    const std::string d = sep == nullptr ? "" : (sep->is_string() ? sep->str() : PyStr(*sep));
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(v)) {
      const Value x = attribute != nullptr && !attribute->is_none()
                          ? AttributeOf(*this, item, PyStr(*attribute))
                          : item;
      if (!first) out += d;
      first = false;
      out += x.is_string() ? x.str() : PyStr(x);
      if (out.size() > limits_.max_output_bytes) Charge(out.size());
    }
    return MakeString(std::move(out));
  }
  if (name == "first") {
    std::vector<Value> items = Iterate(v);
    return items.empty() ? Value() : items.front();
  }
  if (name == "last") {
    if (v.is_list() && v.list().generator) Fail("'generator' object is not reversible");
    std::vector<Value> items = Iterate(v);
    return items.empty() ? Value() : items.back();
  }
  if (name == "list") {
    if (v.is_list() && !v.list().tuple && !v.list().generator) return v;
    return MakeList(Iterate(v));
  }
  if (name == "items") {
    if (v.is_undefined()) return MakeList({}, false, true);
    if (!v.is_dict()) Fail("Can only get item pairs from a mapping.");
    Value items = DictMethod(*this, v, "items", {});
    return Value::MakeList(items.list().items, false, /*generator=*/true);
  }
  if (name == "int") {
    args.Check("int", 2, {"default", "base"});
    const Value* dflt = args.Get(0, "default");
    const Value fallback = dflt != nullptr ? *dflt : Value::Int(0);
    if (v.kind() == K::kInt || v.kind() == K::kBool) return Value::Int(v.integer());
    if (v.kind() == K::kFloat) {
      if (!std::isfinite(v.number()) || std::fabs(v.number()) >= 9.2e18) return fallback;
      return Value::Int(static_cast<int64_t>(v.number()));
    }
    if (v.is_string()) {
      const std::string s(PyStrip(v.str(), true, true));
      char* end = nullptr;
      errno = 0;
      const long long i =
          std::strtoll(s.c_str(), &end, static_cast<int>(IntArg(args.Get(1, "base"), 10, "base")));
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::Int(i);
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(f));
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value* dflt = args.Get(0, "default");
    if (v.is_number()) return Value::Float(v.number());
    if (v.is_string()) {
      const std::string s(PyStrip(v.str(), true, true));
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(f);
    }
    return dflt != nullptr ? *dflt : Value::Float(0);
  }
  if (name == "abs") {
    if (v.kind() == K::kFloat) return Value::Float(std::fabs(v.number()));
    if (!v.is_number()) Fail("bad operand type for abs(): '" + v.TypeName() + "'");
    if (v.integer() == INT64_MIN)
      Fail("integer overflow (values beyond 64 bits are not supported)");
    return Value::Int(std::llabs(v.integer()));
  }
  if (name == "replace") {
    args.Check("replace", 3, {"old", "new", "count"});
    const Value* old = args.Get(0, "old");
    const Value* with = args.Get(1, "new");
    if (old == nullptr || with == nullptr) Fail("replace needs old and new");
    return MakeString(Replace(*this, as_text(), old->is_string() ? old->str() : PyStr(*old),
                              with->is_string() ? with->str() : PyStr(*with),
                              IntArg(args.Get(2, "count"), -1, "count")));
  }
  if (name == "indent") {
    args.Check("indent", 3, {"width", "first", "blank"});
    const Value* first = args.Get(1, "first");
    const Value* blank = args.Get(2, "blank");
    return MakeString(Indent(*this, as_text(), args.Get(0, "width"),
                             first != nullptr && first->Truthy(),
                             blank != nullptr && blank->Truthy()));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      const std::vector<size_t> offsets = CodePointOffsets(v.str());
      std::string out;
      for (size_t i = offsets.size() - 1; i > 0; --i) {
        out.append(v.str(), offsets[i - 1], offsets[i] - offsets[i - 1]);
      }
      return MakeString(std::move(out));
    }
    std::vector<Value> items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return MakeList(std::move(items), false, /*generator=*/true);
  }
  if (name == "unique") {
    args.Check("unique", 1, {"case_sensitive", "attribute"});
    const Value* cs = args.Get(0, "case_sensitive");
    const Value* attribute = args.Get(1, "attribute");
    const bool case_sensitive = cs != nullptr && cs->Truthy();
    std::vector<Value> seen;
    std::vector<Value> out;
    for (const Value& item : Iterate(v)) {
      Value key = attribute != nullptr ? AttributeOf(*this, item, PyStr(*attribute)) : item;
      if (key.is_string() && !case_sensitive) key = Value::Str(PyLower(key.str()));
      bool dup = false;
      for (const Value& s : seen) {
        Step();
        if (Equals(s, key)) {
          dup = true;
          break;
        }
      }
      if (dup) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return MakeList(std::move(out), false, /*generator=*/true);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    const size_t first_test_arg = by_attr ? 1 : 0;
    if (by_attr && args.positional.empty()) Fail(name + " needs an attribute name");
    const std::string test = args.positional.size() > first_test_arg
                                 ? StringArg(&args.positional[first_test_arg], "test name")
                                 : "";
    Args test_args;
    for (size_t i = first_test_arg + 1; i < args.positional.size(); ++i) {
      test_args.positional.push_back(args.positional[i]);
    }
    std::vector<Value> out;
    // jinja2 yields nothing for a falsy sequence (None too) without looking further.
    if (!v.Truthy()) return MakeList({}, false, /*generator=*/true);
    for (const Value& item : Iterate(v)) {
      const Value x =
          by_attr ? AttributeOf(*this, item, StringArg(&args.positional[0], "attribute")) : item;
      const bool pass = test.empty() ? x.Truthy() : ApplyTest(test, x, test_args);
      if (pass == keep_if) out.push_back(item);
    }
    return MakeList(std::move(out), false, /*generator=*/true);
  }
  if (name == "map") {
    std::vector<Value> out;
    if (!v.Truthy()) return MakeList({}, false, /*generator=*/true);
    const Value* attribute = args.Named("attribute");
    if (attribute != nullptr) {
      const Value* dflt = args.Named("default");
      for (const Value& item : Iterate(v)) {
        Value x = AttributeOf(*this, item, PyStr(*attribute));
        if (x.is_undefined() && dflt != nullptr) x = *dflt;
        out.push_back(std::move(x));
      }
    } else {
      if (args.positional.empty()) Fail("map needs a filter name or attribute=");
      const std::string filter = StringArg(&args.positional[0], "filter name");
      Args rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      rest.named = args.named;
      for (const Value& item : Iterate(v)) out.push_back(ApplyFilter(filter, item, rest));
    }
    return MakeList(std::move(out), false, /*generator=*/true);
  }
  if (name == "sort") {
    args.Check("sort", 3, {"reverse", "case_sensitive", "attribute"});
    const Value* rev = args.Get(0, "reverse");
    const Value* cs = args.Get(1, "case_sensitive");
    const Value* attribute = args.Get(2, "attribute");
    const bool case_sensitive = cs != nullptr && cs->Truthy();
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& item : Iterate(v)) {
      Value key = attribute != nullptr ? AttributeOf(*this, item, PyStr(*attribute)) : item;
      if (key.is_string() && !case_sensitive) key = Value::Str(PyLower(key.str()));
      keyed.emplace_back(std::move(key), item);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
      Step();
      return Less(a.first, b.first);
    });
    if (rev != nullptr && rev->Truthy()) std::reverse(keyed.begin(), keyed.end());
    std::vector<Value> out;
    for (auto& [key, item] : keyed) out.push_back(std::move(item));
    return MakeList(std::move(out));
  }
  Fail("no filter named '" + name + "'");
}

}  // namespace dikkat::chat
