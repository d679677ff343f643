#include "model/chat/interpreter.h"

#include <string>
#include <utility>

#include "model/chat/operators.h"
#include "model/chat/python_text.h"

namespace dikkat::chat {
namespace {

constexpr int kMaxExecDepth = 256;

// Python's slice.indices(): normalised start/stop for `step`.
void SliceIndices(int64_t length, const Value* start, const Value* stop, int64_t step,
                  int64_t* out_start, int64_t* out_stop) {
  const auto clamp = [&](const Value* v, int64_t dflt) {
    if (v == nullptr || v->is_none()) return dflt;
    if (v->kind() != Value::Kind::kInt && v->kind() != Value::Kind::kBool) {
      Fail("slice indices must be integers or None");
    }
    int64_t i = v->integer();
    if (i < 0) {
      i += length;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= length) {
      i = step < 0 ? length - 1 : length;
    }
    return i;
  };
  *out_start = clamp(start, step < 0 ? length - 1 : 0);
  *out_stop = clamp(stop, step < 0 ? -1 : length);
}

}  // namespace

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

const Value* Args::Get(size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : named) {
    if (key == name) return &value;
  }
  return nullptr;
}

const Value* Args::Named(const char* name) const {
  for (const auto& [key, value] : named) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Args::Check(const char* what, size_t max_positional,
                 std::initializer_list<const char*> names) const {
  if (positional.size() > max_positional) {
    Fail(std::string(what) + "() takes at most " + std::to_string(max_positional) +
         " positional argument(s), got " + std::to_string(positional.size()));
  }
  for (const auto& [key, value] : named) {
    bool known = false;
    for (const char* n : names) known = known || key == n;
    if (!known) Fail(std::string(what) + "() got an unexpected keyword argument '" + key + "'");
  }
}

Interpreter::Interpreter(const RenderLimits& limits, std::shared_ptr<Scope> globals)
    : limits_(limits), globals_(std::move(globals)) {}

Interpreter::~Interpreter() {
  // A namespace can hold itself (`{% set ns.me = ns %}`); emptying them all
  // breaks every such cycle.
  for (const auto& ns : namespaces_) {
    ns->entries.clear();
    ns->index.clear();
  }
}

void Interpreter::Track(const Value& ns) { namespaces_.push_back(ns.shared_namespace()); }

std::string Interpreter::Render(const Body& body) {
  auto root = std::make_shared<Scope>();
  root->parent = globals_;
  std::string out;
  Exec(body, root, &out);
  return out;
}

void Interpreter::Step() {
  if (++steps_ > limits_.max_steps) {
    FailLimit("the template took more than " + std::to_string(limits_.max_steps) +
              " evaluation steps");
  }
}

void Interpreter::Charge(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    FailLimit("a value of " + std::to_string(bytes) + " bytes exceeds the limit of " +
              std::to_string(limits_.max_output_bytes));
  }
  total_bytes_ += bytes;
  if (total_bytes_ > limits_.max_total_bytes) {
    FailLimit("the template built more than " + std::to_string(limits_.max_total_bytes) +
              " bytes of values");
  }
}

void Interpreter::ChargeSlots(size_t count) {
  // Compared before the multiplication can overflow.
  if (count > limits_.max_total_bytes / sizeof(Value)) {
    FailLimit("a list or dict of " + std::to_string(count) + " items exceeds the limit of " +
              std::to_string(limits_.max_total_bytes) + " bytes");
  }
  total_bytes_ += count * sizeof(Value);
  if (total_bytes_ > limits_.max_total_bytes) {
    FailLimit("the template built more than " + std::to_string(limits_.max_total_bytes) +
              " bytes of values");
  }
}

Value Interpreter::MakeString(std::string s) {
  Charge(s.size());
  return Value::Str(std::move(s));
}

Value Interpreter::MakeList(std::vector<Value> items, bool tuple, bool generator) {
  ChargeSlots(items.size());
  return Value::MakeList(std::move(items), tuple, generator);
}

void Interpreter::Append(std::string* out, std::string_view text) {
  if (out->size() + text.size() > limits_.max_output_bytes) {
    FailLimit("the rendered text exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out->append(text);
}

// ---- statements --------------------------------------------------------------

Interpreter::Flow Interpreter::Exec(const Body& body, const ScopePtr& scope, std::string* out) {
  // The parser bounds nesting within a template; macro calls multiply it.
  if (++depth_ > kMaxExecDepth) {
    FailLimit("blocks and macro calls nested more than " + std::to_string(kMaxExecDepth) + " deep");
  }
  Flow flow = Flow::kNormal;
  for (const auto& stmt : body) {
    flow = ExecStmt(*stmt, scope, out);
    if (flow != Flow::kNormal) break;
  }
  --depth_;
  return flow;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& stmt, const ScopePtr& scope, std::string* out) {
  Step();
  try {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        Append(out, stmt.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        const Value v = Eval(*stmt.expr, scope);
        if (v.is_string()) {
          Append(out, v.str());
        } else {
          Append(out, PyStr(v));
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : stmt.branches) {
          if (Eval(*cond, scope).Truthy()) return Exec(body, scope, out);
        }
        return Exec(stmt.else_body, scope, out);
      case Stmt::Kind::kFor:
        return ExecFor(stmt, scope, out);
      case Stmt::Kind::kSet: {
        const Value v = Eval(*stmt.expr, scope);
        if (stmt.attr.empty()) {
          Assign(stmt.targets, v, scope.get());
          return Flow::kNormal;
        }
        const Value* ns = scope->Find(stmt.targets[0]);
        if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
          Fail("can only assign an attribute of a namespace(): '" + stmt.targets[0] + "' is " +
               (ns == nullptr ? std::string("undefined") : ns->TypeName()));
        }
        ns->namespace_attributes().Set(stmt.attr, v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        Exec(stmt.body, scope, &captured);
        Value v = MakeString(std::move(captured));
        if (stmt.filter != nullptr) v = ApplyFilterChain(*stmt.filter, v, scope);
        Assign(stmt.targets, v, scope.get());
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        Exec(stmt.body, scope, &captured);
        const Value v = ApplyFilterChain(*stmt.filter, MakeString(std::move(captured)), scope);
        Append(out, v.is_string() ? v.str() : PyStr(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        Callable macro;
        macro.type = Callable::Type::kMacro;
        macro.name = stmt.macro->name;
        macro.macro = stmt.macro.get();
        macro.closure = scope;
        scope->vars[stmt.macro->name] = Value::MakeCallable(std::move(macro));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kBlock:
        return Exec(stmt.body, scope, out);
    }
  } catch (TemplateError& e) {
    if (e.line == 0) {
      e.line = stmt.line;
      // raise_exception's message is the template author's, kept verbatim.
      if (e.kind != TemplateError::Kind::kRaised) {
        e.message = "line " + std::to_string(stmt.line) + ": " + e.message;
      }
    }
    throw;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& stmt, const ScopePtr& scope, std::string* out) {
  std::vector<Value> items = Iterate(Eval(*stmt.expr, scope));
  if (stmt.cond != nullptr) {
    // `for x in xs if cond`: filtered before the loop, so loop.length and
    // loop.index count only the items kept.
    std::vector<Value> kept;
    for (Value& item : items) {
      Step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      Assign(stmt.targets, item, probe.get());
      if (Eval(*stmt.cond, probe).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return Exec(stmt.else_body, scope, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Step();
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    Assign(stmt.targets, items[i], iteration.get());
    Dict loop;
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    if (i > 0) loop.Set("previtem", items[i - 1]);
    if (i + 1 < n) loop.Set("nextitem", items[i + 1]);
    iteration->vars["loop"] = Value::MakeDict(std::move(loop));
    if (Exec(stmt.body, iteration, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::Assign(const std::vector<std::string>& targets, const Value& value,
                         Scope* scope) {
  if (targets.size() == 1) {
    scope->vars[targets[0]] = value;
    return;
  }
  std::vector<Value> parts = Iterate(value);
  if (parts.size() != targets.size()) {
    Fail("cannot unpack " + std::to_string(parts.size()) + " value(s) into " +
         std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = parts[i];
}

Value Interpreter::ApplyFilterChain(const Expr& chain, Value input, const ScopePtr& scope) {
  if (chain.args[0] != nullptr) input = ApplyFilterChain(*chain.args[0], std::move(input), scope);
  return ApplyFilter(chain.name, input, EvalArgs(chain, 1, scope));
}

// ---- expressions -------------------------------------------------------------

Args Interpreter::EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope) {
  Args args;
  for (size_t i = first; i < expr.args.size(); ++i) {
    args.positional.push_back(Eval(*expr.args[i], scope));
  }
  for (const auto& [name, value] : expr.kwargs) args.named.emplace_back(name, Eval(*value, scope));
  return args;
}

Value Interpreter::Eval(const Expr& expr, const ScopePtr& scope) {
  Step();
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName: {
      const Value* v = scope->Find(expr.name);
      return v != nullptr ? *v : Value();
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& item : expr.args) items.push_back(Eval(*item, scope));
      return MakeList(std::move(items), expr.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Dict dict;
      for (const auto& [key, value] : expr.dict_items) {
        const Value k = Eval(*key, scope);
        if (!k.is_string()) Fail("dict literal keys must be strings, got " + k.TypeName());
        dict.Set(k.str(), Eval(*value, scope));
      }
      ChargeSlots(dict.entries.size());
      return Value::MakeDict(std::move(dict));
    }
    case Expr::Kind::kGetAttr:
      return GetAttr(Eval(*expr.args[0], scope), expr.name);
    case Expr::Kind::kGetItem:
      return GetItem(Eval(*expr.args[0], scope), Eval(*expr.args[1], scope));
    case Expr::Kind::kSlice:
      return EvalSlice(expr, scope);
    case Expr::Kind::kCall: {
      const Expr& callee = *expr.args[0];
      if (callee.kind == Expr::Kind::kGetAttr) {
        // obj.method(...): called directly, without a bound-method value.
        const Value self = Eval(*callee.args[0], scope);
        return CallMethod(self, callee.name, EvalArgs(expr, 1, scope));
      }
      const Value f = Eval(callee, scope);
      return Call(f, EvalArgs(expr, 1, scope));
    }
    case Expr::Kind::kFilter:
      return ApplyFilter(expr.name, Eval(*expr.args[0], scope), EvalArgs(expr, 1, scope));
    case Expr::Kind::kTest: {
      const Value v = Eval(*expr.args[0], scope);
      return Value::Bool(ApplyTest(expr.name, v, EvalArgs(expr, 1, scope)) != expr.negated);
    }
    case Expr::Kind::kUnary: {
      const Value v = Eval(*expr.args[0], scope);
      if (expr.name == "not") return Value::Bool(!v.Truthy());
      return UnaryOperator(expr.name, v);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(expr, scope);
    case Expr::Kind::kCompare:
      return EvalCompare(expr, scope);
    case Expr::Kind::kCondExpr:
      if (Eval(*expr.args[1], scope).Truthy()) return Eval(*expr.args[0], scope);
      return expr.args[2] != nullptr ? Eval(*expr.args[2], scope) : Value();
  }
  return Value();
}

Value Interpreter::EvalBinary(const Expr& expr, const ScopePtr& scope) {
  const std::string& op = expr.name;
  Value a = Eval(*expr.args[0], scope);
  if (op == "and") return a.Truthy() ? Eval(*expr.args[1], scope) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*expr.args[1], scope);
  const Value b = Eval(*expr.args[1], scope);
  if (op == "~") {
    std::string s = PyStr(a);
    const std::string t = PyStr(b);
    Charge(s.size() + t.size());
    return Value::Str(s + t);
  }
  return BinaryOperator(*this, op, a, b);
}

Value Interpreter::EvalCompare(const Expr& expr, const ScopePtr& scope) {
  Value left = Eval(*expr.args[0], scope);
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    Value right = Eval(*expr.args[i + 1], scope);
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "==") {
      result = Equals(left, right);
    } else if (op == "!=") {
      result = !Equals(left, right);
    } else if (op == "<") {
      result = Less(left, right);
    } else if (op == ">") {
      result = Less(right, left);
    } else if (op == "<=") {
      result = !Less(right, left);
    } else if (op == ">=") {
      result = !Less(left, right);
    } else {  // in, not in
      result = ApplyTest("in", left, Args{{right}, {}});
      if (op == "not in") result = !result;
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Value Interpreter::EvalSlice(const Expr& expr, const ScopePtr& scope) {
  const Value object = Eval(*expr.args[0], scope);
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (expr.args[i + 1] != nullptr) parts[i] = Eval(*expr.args[i + 1], scope);
  }
  const auto part = [&](int i) -> const Value* {
    return expr.args[i + 1] != nullptr ? &parts[i] : nullptr;
  };
  int64_t step = 1;
  if (part(2) != nullptr && !parts[2].is_none()) {
    if (parts[2].kind() != Value::Kind::kInt) Fail("slice indices must be integers or None");
    step = parts[2].integer();
    if (step == 0) Fail("slice step cannot be zero");
  }
  if (object.is_undefined()) Fail("cannot slice an undefined value");
  std::vector<size_t> offsets;
  int64_t length = 0;
  if (object.is_string()) {
    offsets = CodePointOffsets(object.str());
    length = static_cast<int64_t>(offsets.size()) - 1;
  } else if (object.is_list() && !object.list().generator) {
    length = static_cast<int64_t>(object.list().items.size());
  } else {
    Fail("'" + object.TypeName() + "' object is not subscriptable");
  }
  int64_t start = 0;
  int64_t stop = 0;
  SliceIndices(length, part(0), part(1), step, &start, &stop);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    picked.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past either end
  }
  if (object.is_string()) {
    std::string s;
    for (int64_t i : picked) {
      s.append(object.str(), offsets[i], offsets[i + 1] - offsets[i]);
    }
    return MakeString(std::move(s));
  }
  std::vector<Value> items;
  for (int64_t i : picked) items.push_back(object.list().items[i]);
  return MakeList(std::move(items), object.list().tuple);
}

std::vector<Value> Interpreter::Iterate(const Value& value) {
  std::vector<Value> items;
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return items;
    case Value::Kind::kList:
      return value.list().items;
    case Value::Kind::kDict:
      for (const auto& [key, item] : value.dict().entries) items.push_back(Value::Str(key));
      return items;
    case Value::Kind::kString: {
      const std::string& s = value.str();
      for (size_t i = 0; i < s.size();) {
        const size_t n = Utf8Length(s, i);
        items.push_back(Value::Str(s.substr(i, n)));
        i += n;
      }
      ChargeSlots(items.size());
      return items;
    }
    default:
      Fail("'" + value.TypeName() + "' object is not iterable");
  }
}

Value Interpreter::Call(const Value& callee, const Args& args) {
  if (callee.kind() != Value::Kind::kCallable) {
    Fail(callee.is_undefined() ? "an undefined value is not callable"
                               : "'" + callee.TypeName() + "' object is not callable");
  }
  const Callable& c = callee.callable();
  switch (c.type) {
    case Callable::Type::kMacro:
      return CallMacro(c, args);
    case Callable::Type::kMethod:
      return CallMethod(*c.self, c.name, args);
    case Callable::Type::kGlobal:
      break;
  }
  return CallGlobal(c.name, args);
}

Value Interpreter::CallMacro(const Callable& c, const Args& args) {
  const MacroDef& m = *c.macro;
  if (args.positional.size() > m.params.size()) {
    Fail("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) +
         " argument(s)");
  }
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    FailLimit("macro calls nested more than " + std::to_string(limits_.max_call_depth) + " deep");
  }
  struct Release {
    int* depth;
    ~Release() { --*depth; }
  } release{&call_depth_};
  auto scope = std::make_shared<Scope>();
  scope->parent = c.closure.lock();
  if (scope->parent == nullptr) Fail("macro '" + m.name + "' is called after its scope ended");
  for (const auto& [name, value] : args.named) {
    bool known = false;
    for (const auto& p : m.params) known = known || p == name;
    if (!known) Fail("macro '" + m.name + "' takes no keyword argument '" + name + "'");
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Value* given = args.Get(i, m.params[i].c_str());
    if (given != nullptr) {
      scope->vars[m.params[i]] = *given;
    } else if (m.defaults[i] != nullptr) {
      scope->vars[m.params[i]] = Eval(*m.defaults[i], scope);
    } else {
      scope->vars[m.params[i]] = Value();
    }
  }
  std::string out;
  Exec(m.body, scope, &out);
  return MakeString(std::move(out));
}

}  // namespace dikkat::chat
