// Walks a parsed template and renders it. One Interpreter per render: it owns
// the scopes, the output and the work counters that bound the render.
//
// Scoping follows jinja2: a `{% for %}` iteration and a macro call open a
// scope (what `set` assigns there is gone after it), `{% if %}` does not;
// macros see the scope they were defined in, looked up when they run;
// namespace() objects are the way to carry a value out of a loop.
#ifndef DIKKAT_MODEL_CHAT_INTERPRETER_H_
#define DIKKAT_MODEL_CHAT_INTERPRETER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/chat/ast.h"
#include "model/chat/render_limits.h"
#include "model/chat/value.h"

namespace dikkat::chat {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* Find(const std::string& name) const;
};

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument at `index` or named `name`, or null.
  const Value* Get(size_t index, const char* name) const;
  // The keyword argument `name`, or null.
  const Value* Named(const char* name) const;
  // Fails unless at most `max_positional` positional arguments and only the
  // named ones listed were given.
  void Check(const char* what, size_t max_positional,
             std::initializer_list<const char*> names) const;
};

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, std::shared_ptr<Scope> globals);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the template body; throws TemplateError.
  std::string Render(const Body& body);

  // ---- used by the built-ins (methods.cc, filters.cc, jinja_tests.cc, operators.cc) ----
  void Step();
  size_t max_value_bytes() const { return limits_.max_output_bytes; }
  size_t max_total_bytes() const { return limits_.max_total_bytes; }
  // Fails if a value of `bytes` would exceed max_output_bytes, else charges
  // it to max_total_bytes.
  void Charge(size_t bytes);
  // Charges `count` list or dict slots to max_total_bytes (a list is not
  // text: max_output_bytes does not apply to it).
  void ChargeSlots(size_t count);
  // Every namespace() made in this render, emptied at its end.
  void Track(const Value& ns);
  Value MakeString(std::string s);
  Value MakeList(std::vector<Value> items, bool tuple = false, bool generator = false);
  // The items a for loop over `value` visits (dict: keys; string: code
  // points; undefined: none).
  std::vector<Value> Iterate(const Value& value);
  Value GetAttr(const Value& object, const std::string& name);
  Value GetItem(const Value& object, const Value& key);
  Value Call(const Value& callee, const Args& args);
  Value CallMethod(const Value& self, const std::string& name, const Args& args);
  // namespace(), range(), dict(), raise_exception(), strftime_now().
  Value CallGlobal(const std::string& name, const Args& args);
  Value ApplyFilter(const std::string& name, const Value& input, const Args& args);
  bool ApplyTest(const std::string& name, const Value& value, const Args& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using ScopePtr = std::shared_ptr<Scope>;

  Flow Exec(const Body& body, const ScopePtr& scope, std::string* out);
  Flow ExecStmt(const Stmt& stmt, const ScopePtr& scope, std::string* out);
  Flow ExecFor(const Stmt& stmt, const ScopePtr& scope, std::string* out);
  void Assign(const std::vector<std::string>& targets, const Value& value, Scope* scope);
  Value ApplyFilterChain(const Expr& chain, Value input, const ScopePtr& scope);
  void Append(std::string* out, std::string_view text);

  Value Eval(const Expr& expr, const ScopePtr& scope);
  Value EvalBinary(const Expr& expr, const ScopePtr& scope);
  Value EvalCompare(const Expr& expr, const ScopePtr& scope);
  Value EvalSlice(const Expr& expr, const ScopePtr& scope);
  Args EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope);
  Value CallMacro(const Callable& macro, const Args& args);

  RenderLimits limits_;
  ScopePtr globals_;
  int64_t steps_ = 0;
  size_t total_bytes_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int depth_ = 0;       // nested blocks
  int call_depth_ = 0;  // nested macro calls
};

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_INTERPRETER_H_
