// The value type of the chat-template interpreter: what a Jinja expression
// evaluates to, with Python's semantics where templates can observe them
// (truthiness, equality, ordering, str(), repr(), json.dumps()).
//
// Values are cheap to copy: strings, lists and dicts are immutable and shared
// (Hugging Face renders in jinja2's ImmutableSandboxedEnvironment, where
// templates cannot mutate containers). The one mutable kind is a namespace(),
// whose attributes `{% set ns.x = ... %}` assigns; copies share it, as in
// Python. Not thread-safe to mutate; each render owns the values it makes.
#ifndef DIKKAT_MODEL_CHAT_VALUE_H_
#define DIKKAT_MODEL_CHAT_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace dikkat::chat {

struct MacroDef;
struct Scope;
class Value;

// Errors inside the interpreter are thrown as TemplateError and turned into
// an absl::Status at the library's boundary (ChatTemplate::Parse / Render);
// none escapes it. kind: what the Status code will be.
struct TemplateError {
  enum class Kind { kInvalid, kRaised, kLimit };
  Kind kind = Kind::kInvalid;
  std::string message;
  int line = 0;  // 0: not known yet (filled in by the statement that ran)
};
[[noreturn]] void Fail(std::string message);
[[noreturn]] void FailLimit(std::string message);

// Lists and dicts nest at most this deep (a context from JSON, or values a
// template builds, e.g. `{% set ns.x = [ns.x] %}` in a loop): everything that
// walks a value (printing, tojson, ==, destruction) recurses, so the depth is
// what bounds the stack. Deeper is RESOURCE_EXHAUSTED.
inline constexpr int kMaxValueDepth = 128;

struct List {
  std::vector<Value> items;
  bool tuple = false;      // printed as (a, b)
  bool generator = false;  // jinja2's map/select/... return generators: no len(), no JSON
  int depth = 1;           // 1 + the deepest item's depth
};

// A dict with Python's insertion order; keys are strings (JSON objects and
// template dict literals with string keys are all templates make).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  std::unordered_map<std::string, size_t> index;
  int depth = 1;  // as List::depth; set by Value::MakeDict

  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};

// A callable: a template macro, a method bound to its receiver
// (`s.strip`, `d.items`) or a global function (`namespace`, `range`, ...).
struct Callable {
  enum class Type { kMacro, kMethod, kGlobal };
  Type type = Type::kGlobal;
  std::string name;
  const MacroDef* macro = nullptr;  // kMacro
  // kMacro: the scope it was defined in. Weak: that scope holds the macro,
  // and a strong pointer would make a cycle that is never freed.
  std::weak_ptr<Scope> closure;
  std::shared_ptr<const Value> self;  // kMethod: the receiver
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  // markupsafe.Markup: what `| safe` makes. `+` with a plain string escapes
  // that string's HTML characters (even with autoescape off, as jinja2 does).
  static Value Markup(std::string s);
  static Value MakeList(std::vector<Value> items, bool tuple = false, bool generator = false);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict attributes);
  static Value MakeCallable(Callable callable);
  // JSON -> Value, keeping the object key order (Python's json.loads does).
  // Fails (TemplateError) past kMaxValueDepth.
  static Value FromJson(const nlohmann::ordered_json& json, int depth = 1);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {  // Python: bool is an int
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  bool boolean() const { return b_; }
  int64_t integer() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double number() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(integer()); }
  const std::string& str() const { return *s_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }  // kDict and kNamespace
  Dict& namespace_attributes() const { return *dict_; }
  const std::shared_ptr<Dict>& shared_namespace() const { return dict_; }
  const Callable& callable() const { return *fn_; }

  // Python semantics.
  bool Truthy() const;
  std::string TypeName() const;  // Python's type name, for error messages
  // Nesting of lists and dicts (0 for scalars; a namespace counts as 1: its
  // attributes may change and may hold itself, see PyStr).
  int depth() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool markup_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Python's ==, and < for the types that order (numbers, strings, lists);
// Less fails on other pairs, as Python raises TypeError.
bool Equals(const Value& a, const Value& b);
bool Less(const Value& a, const Value& b);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_VALUE_H_
