// Attribute and item access, the methods templates call on strings, dicts
// and lists, and the globals: Hugging Face's raise_exception and
// strftime_now next to jinja2's namespace, range and dict. Python 3 and
// jinja2 3.1 behaviour, including where they raise.
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

// A list of new strings, charged to the render.
Value StrList(Interpreter& in, std::vector<std::string> parts) {
  std::vector<Value> items;
  size_t bytes = 0;
  for (auto& p : parts) {
    bytes += p.size();
    items.push_back(Value::Str(std::move(p)));
  }
  in.Charge(bytes);
  return in.MakeList(std::move(items));
}

Value StripMethod(Interpreter& in, const std::string& s, const std::string& name,
                  const Args& args) {
  args.Check(name.c_str(), 1, {});
  const bool left = name != "rstrip";
  const bool right = name != "lstrip";
  const Value* chars = args.Get(0, "chars");
  if (chars == nullptr || chars->is_none())
    return in.MakeString(std::string(PyStrip(s, left, right)));
  return in.MakeString(std::string(PyStripChars(s, StringArg(chars, "chars"), left, right)));
}

Value SplitMethod(Interpreter& in, const std::string& s, const std::string& /*name*/,
                  const Args& args) {
  args.Check("split", 2, {"sep", "maxsplit"});
  return StrList(in,
                 Split(in, s, args.Get(0, "sep"), IntArg(args.Get(1, "maxsplit"), -1, "maxsplit")));
}

Value StartsOrEndsWith(Interpreter& /*in*/, const std::string& s, const std::string& name,
                       const Args& args) {
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

Value ReplaceMethod(Interpreter& in, const std::string& s, const std::string& /*name*/,
                    const Args& args) {
  args.Check("replace", 3, {});
  return in.MakeString(Replace(in, s, StringArg(args.Get(0, ""), "replace() argument 1"),
                               StringArg(args.Get(1, ""), "replace() argument 2"),
                               IntArg(args.Get(2, ""), -1, "count")));
}

Value FindOrCount(Interpreter& /*in*/, const std::string& s, const std::string& name,
                  const Args& args) {
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

Value JoinMethod(Interpreter& in, const std::string& s, const std::string& /*name*/,
                 const Args& args) {
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

Value IsCharacterClass(Interpreter& /*in*/, const std::string& s, const std::string& name,
                       const Args& /*args*/) {
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

Value RemoveAffix(Interpreter& in, const std::string& s, const std::string& name,
                  const Args& args) {
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

}  // namespace

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

Value StringMethod(Interpreter& in, const std::string& s, const std::string& name,
                   const Args& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return StripMethod(in, s, name, args);
  if (name == "split") return SplitMethod(in, s, name, args);
  if (name == "splitlines") return StrList(in, PySplitLines(s));
  if (name == "startswith" || name == "endswith") return StartsOrEndsWith(in, s, name, args);
  if (name == "upper") return in.MakeString(PyUpper(s));
  if (name == "lower" || name == "casefold") return in.MakeString(PyLower(s));
  if (name == "replace") return ReplaceMethod(in, s, name, args);
  if (name == "capitalize") return in.MakeString(PyCapitalize(s));
  if (name == "title") return in.MakeString(PyTitle(s));
  if (name == "find" || name == "rfind" || name == "count" || name == "index")
    return FindOrCount(in, s, name, args);
  if (name == "join") return JoinMethod(in, s, name, args);
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower")
    return IsCharacterClass(in, s, name, args);
  if (name == "removeprefix" || name == "removesuffix") return RemoveAffix(in, s, name, args);
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

}  // namespace dikkat::chat
