// jinja2's filters (`value | name(args)`), one function each, as jinja2 3.1
// defines them, with Hugging Face's tojson (json.dumps, ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/chat/builtins.h"
#include "model/chat/interpreter.h"
#include "model/chat/python_text.h"

namespace dikkat::chat {
namespace {

using K = Value::Kind;
using FilterFn = Value (*)(Interpreter& in, const std::string& name, const Value& v,
                           const Args& args);

// soft_str(): strings as they are, anything else as str() makes it.
std::string Text(const Value& v) { return v.is_string() ? v.str() : PyStr(v); }

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

Value FilterSafe(Interpreter& /*in*/, const std::string& /*name*/, const Value& v,
                 const Args& /*args*/) {
  return v.is_string() ? Value::Markup(v.str()) : Value::Markup(PyStr(v));
}

Value FilterTrim(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  args.Check("trim", 1, {"chars"});
  const Value* chars = args.Get(0, "chars");
  const std::string s = Text(v);
  if (chars == nullptr || chars->is_none())
    return in.MakeString(std::string(PyStrip(s, true, true)));
  return in.MakeString(std::string(PyStripChars(s, StringArg(chars, "chars"), true, true)));
}

Value FilterString(Interpreter& in, const std::string& /*name*/, const Value& v,
                   const Args& /*args*/) {
  return v.is_string() ? v : in.MakeString(Text(v));
}

Value FilterUpper(Interpreter& in, const std::string& /*name*/, const Value& v,
                  const Args& /*args*/) {
  return in.MakeString(PyUpper(Text(v)));
}

Value FilterLower(Interpreter& in, const std::string& /*name*/, const Value& v,
                  const Args& /*args*/) {
  return in.MakeString(PyLower(Text(v)));
}

Value FilterCapitalize(Interpreter& in, const std::string& /*name*/, const Value& v,
                       const Args& /*args*/) {
  return in.MakeString(PyCapitalize(Text(v)));
}

Value FilterTitle(Interpreter& in, const std::string& /*name*/, const Value& v,
                  const Args& /*args*/) {
  // jinja2's do_title: the text split after runs of "-", whitespace, "(",
  // "{", "[", "<"; each piece's first code point upped, the rest lowered.
  const std::string text = Text(v);
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
  return in.MakeString(std::move(out));
}

Value FilterLength(Interpreter& /*in*/, const std::string& /*name*/, const Value& v,
                   const Args& /*args*/) {
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

Value FilterTojson(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
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
    in.Charge(static_cast<size_t>(std::max<int64_t>(0, n)));
    unit.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  std::string json =
      JsonDumps(v, indent == nullptr || indent->is_none() ? nullptr : &unit, in.max_value_bytes());
  return in.MakeString(std::move(json));
}

Value FilterDefault(Interpreter& /*in*/, const std::string& name, const Value& v,
                    const Args& args) {
  args.Check(name.c_str(), 2, {"default_value", "boolean"});
  const Value* dflt = args.Get(0, "default_value");
  const Value* boolean = args.Get(1, "boolean");
  const bool use = boolean != nullptr && boolean->Truthy() ? !v.Truthy() : v.is_undefined();
  if (!use) return v;
  return dflt != nullptr ? *dflt : Value::Str("");
}

Value FilterJoin(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  args.Check("join", 2, {"d", "attribute"});
  const Value* sep = args.Get(0, "d");
  const Value* attribute = args.Get(1, "attribute");
  const std::string d = sep == nullptr ? "" : (sep->is_string() ? sep->str() : PyStr(*sep));
  std::string out;
  bool first = true;
  for (const Value& item : in.Iterate(v)) {
    const Value x = attribute != nullptr && !attribute->is_none()
                        ? AttributeOf(in, item, PyStr(*attribute))
                        : item;
    if (!first) out += d;
    first = false;
    out += x.is_string() ? x.str() : PyStr(x);
    if (out.size() > in.max_value_bytes()) in.Charge(out.size());
  }
  return in.MakeString(std::move(out));
}

Value FilterFirst(Interpreter& in, const std::string& /*name*/, const Value& v,
                  const Args& /*args*/) {
  std::vector<Value> items = in.Iterate(v);
  return items.empty() ? Value() : items.front();
}

Value FilterLast(Interpreter& in, const std::string& /*name*/, const Value& v,
                 const Args& /*args*/) {
  if (v.is_list() && v.list().generator) Fail("'generator' object is not reversible");
  std::vector<Value> items = in.Iterate(v);
  return items.empty() ? Value() : items.back();
}

Value FilterList(Interpreter& in, const std::string& /*name*/, const Value& v,
                 const Args& /*args*/) {
  if (v.is_list() && !v.list().tuple && !v.list().generator) return v;
  return in.MakeList(in.Iterate(v));
}

Value FilterItems(Interpreter& in, const std::string& /*name*/, const Value& v,
                  const Args& /*args*/) {
  if (v.is_undefined()) return in.MakeList({}, false, true);
  if (!v.is_dict()) Fail("Can only get item pairs from a mapping.");
  Value items = DictMethod(in, v, "items", {});
  return Value::MakeList(items.list().items, false, /*generator=*/true);
}

Value FilterInt(Interpreter& /*in*/, const std::string& /*name*/, const Value& v,
                const Args& args) {
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

Value FilterFloat(Interpreter& /*in*/, const std::string& /*name*/, const Value& v,
                  const Args& args) {
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

Value FilterAbs(Interpreter& /*in*/, const std::string& /*name*/, const Value& v,
                const Args& /*args*/) {
  if (v.kind() == K::kFloat) return Value::Float(std::fabs(v.number()));
  if (!v.is_number()) Fail("bad operand type for abs(): '" + v.TypeName() + "'");
  if (v.integer() == INT64_MIN) Fail("integer overflow (values beyond 64 bits are not supported)");
  return Value::Int(std::llabs(v.integer()));
}

Value FilterReplace(Interpreter& in, const std::string& /*name*/, const Value& v,
                    const Args& args) {
  args.Check("replace", 3, {"old", "new", "count"});
  const Value* old = args.Get(0, "old");
  const Value* with = args.Get(1, "new");
  if (old == nullptr || with == nullptr) Fail("replace needs old and new");
  return in.MakeString(Replace(in, Text(v), old->is_string() ? old->str() : PyStr(*old),
                               with->is_string() ? with->str() : PyStr(*with),
                               IntArg(args.Get(2, "count"), -1, "count")));
}

Value FilterIndent(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  args.Check("indent", 3, {"width", "first", "blank"});
  const Value* first = args.Get(1, "first");
  const Value* blank = args.Get(2, "blank");
  return in.MakeString(Indent(in, Text(v), args.Get(0, "width"),
                              first != nullptr && first->Truthy(),
                              blank != nullptr && blank->Truthy()));
}

Value FilterReverse(Interpreter& in, const std::string& /*name*/, const Value& v,
                    const Args& /*args*/) {
  if (v.is_string()) {
    const std::vector<size_t> offsets = CodePointOffsets(v.str());
    std::string out;
    for (size_t i = offsets.size() - 1; i > 0; --i) {
      out.append(v.str(), offsets[i - 1], offsets[i] - offsets[i - 1]);
    }
    return in.MakeString(std::move(out));
  }
  std::vector<Value> items = in.Iterate(v);
  std::reverse(items.begin(), items.end());
  return in.MakeList(std::move(items), false, /*generator=*/true);
}

Value FilterUnique(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  args.Check("unique", 1, {"case_sensitive", "attribute"});
  const Value* cs = args.Get(0, "case_sensitive");
  const Value* attribute = args.Get(1, "attribute");
  const bool case_sensitive = cs != nullptr && cs->Truthy();
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : in.Iterate(v)) {
    Value key = attribute != nullptr ? AttributeOf(in, item, PyStr(*attribute)) : item;
    if (key.is_string() && !case_sensitive) key = Value::Str(PyLower(key.str()));
    bool dup = false;
    for (const Value& s : seen) {
      in.Step();
      if (Equals(s, key)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return in.MakeList(std::move(out), false, /*generator=*/true);
}

Value FilterSelect(Interpreter& in, const std::string& name, const Value& v, const Args& args) {
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
  if (!v.Truthy()) return in.MakeList({}, false, /*generator=*/true);
  for (const Value& item : in.Iterate(v)) {
    const Value x =
        by_attr ? AttributeOf(in, item, StringArg(&args.positional[0], "attribute")) : item;
    const bool pass = test.empty() ? x.Truthy() : in.ApplyTest(test, x, test_args);
    if (pass == keep_if) out.push_back(item);
  }
  return in.MakeList(std::move(out), false, /*generator=*/true);
}

Value FilterMap(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  std::vector<Value> out;
  if (!v.Truthy()) return in.MakeList({}, false, /*generator=*/true);
  const Value* attribute = args.Named("attribute");
  if (attribute != nullptr) {
    const Value* dflt = args.Named("default");
    for (const Value& item : in.Iterate(v)) {
      Value x = AttributeOf(in, item, PyStr(*attribute));
      if (x.is_undefined() && dflt != nullptr) x = *dflt;
      out.push_back(std::move(x));
    }
  } else {
    if (args.positional.empty()) Fail("map needs a filter name or attribute=");
    const std::string filter = StringArg(&args.positional[0], "filter name");
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    for (const Value& item : in.Iterate(v)) out.push_back(in.ApplyFilter(filter, item, rest));
  }
  return in.MakeList(std::move(out), false, /*generator=*/true);
}

Value FilterSort(Interpreter& in, const std::string& /*name*/, const Value& v, const Args& args) {
  args.Check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const Value* rev = args.Get(0, "reverse");
  const Value* cs = args.Get(1, "case_sensitive");
  const Value* attribute = args.Get(2, "attribute");
  const bool case_sensitive = cs != nullptr && cs->Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : in.Iterate(v)) {
    Value key = attribute != nullptr ? AttributeOf(in, item, PyStr(*attribute)) : item;
    if (key.is_string() && !case_sensitive) key = Value::Str(PyLower(key.str()));
    keyed.emplace_back(std::move(key), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    in.Step();
    return Less(a.first, b.first);
  });
  if (rev != nullptr && rev->Truthy()) std::reverse(keyed.begin(), keyed.end());
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return in.MakeList(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"safe", FilterSafe},         {"trim", FilterTrim},       {"string", FilterString},
      {"upper", FilterUpper},       {"lower", FilterLower},     {"capitalize", FilterCapitalize},
      {"title", FilterTitle},       {"length", FilterLength},   {"count", FilterLength},
      {"tojson", FilterTojson},     {"default", FilterDefault}, {"d", FilterDefault},
      {"join", FilterJoin},         {"first", FilterFirst},     {"last", FilterLast},
      {"list", FilterList},         {"items", FilterItems},     {"int", FilterInt},
      {"float", FilterFloat},       {"abs", FilterAbs},         {"replace", FilterReplace},
      {"indent", FilterIndent},     {"reverse", FilterReverse}, {"unique", FilterUnique},
      {"select", FilterSelect},     {"reject", FilterSelect},   {"selectattr", FilterSelect},
      {"rejectattr", FilterSelect}, {"map", FilterMap},         {"sort", FilterSort},
  };
  return *filters;
}

}  // namespace

Value Interpreter::ApplyFilter(const std::string& name, const Value& input, const Args& args) {
  Step();
  const auto it = Filters().find(name);
  if (it == Filters().end()) Fail("no filter named '" + name + "'");
  return it->second(*this, name, input, args);
}

}  // namespace dikkat::chat
