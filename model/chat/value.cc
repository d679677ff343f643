#include "model/chat/value.h"

#include <algorithm>
#include <string>
#include <utility>

#include "nlohmann/json.hpp"

namespace dikkat::chat {

void Fail(std::string message) {
  throw TemplateError{TemplateError::Kind::kInvalid, std::move(message), 0};
}

void FailLimit(std::string message) {
  throw TemplateError{TemplateError::Kind::kLimit, std::move(message), 0};
}

const Value* Dict::Find(std::string_view key) const {
  auto it = index.find(std::string(key));
  return it == index.end() ? nullptr : &entries[it->second].second;
}

void Dict::Set(const std::string& key, Value value) {
  auto [it, inserted] = index.emplace(key, entries.size());
  if (inserted) {
    entries.emplace_back(key, std::move(value));
  } else {
    entries[it->second].second = std::move(value);
  }
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::Markup(std::string s) {
  Value v = Str(std::move(s));
  v.markup_ = true;
  return v;
}

namespace {

int NestedDepth(int deepest_child) {
  if (deepest_child + 1 > kMaxValueDepth) {
    FailLimit("lists and dicts nested more than " + std::to_string(kMaxValueDepth) + " deep");
  }
  return deepest_child + 1;
}

}  // namespace

int Value::depth() const {
  switch (kind_) {
    case Kind::kList:
      return list_->depth;
    case Kind::kDict:
      return dict_->depth;
    case Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

Value Value::MakeList(std::vector<Value> items, bool tuple, bool generator) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  const int depth = NestedDepth(deepest);
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(List{std::move(items), tuple, generator, depth});
  return v;
}

Value Value::MakeDict(Dict dict) {
  int deepest = 0;
  for (const auto& [key, item] : dict.entries) deepest = std::max(deepest, item.depth());
  dict.depth = NestedDepth(deepest);
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeNamespace(Dict attributes) {
  Value v = MakeDict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::MakeCallable(Callable callable) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(std::move(callable));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) {
    FailLimit("the context nests lists and objects more than " + std::to_string(kMaxValueDepth) +
              " deep");
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Str(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item, depth + 1));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.Set(key, FromJson(item, depth + 1));
      return MakeDict(std::move(dict));
    }
    default:
      return Value();  // binary / discarded: nothing a chat request holds
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return list_->generator || !list_->items.empty();  // a generator object is truthy
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->generator ? "generator" : list_->tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      if (a.list().tuple != b.list().tuple) return false;
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.Find(key);
        if (other == nullptr || !Equals(value, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.namespace_attributes() == &b.namespace_attributes();
    default:
      return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.number() < b.number();
    }
    return a.integer() < b.integer();
  }
  // UTF-8 byte order is code point order, which is Python's str order.
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  Fail("'<' not supported between instances of '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

}  // namespace dikkat::chat
