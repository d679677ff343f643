#include "model/chat/operators.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/python_text.h"

namespace dikkat::chat {
namespace {

using K = Value::Kind;

[[noreturn]] void Overflow() { Fail("integer overflow (values beyond 64 bits are not supported)"); }

[[noreturn]] void TypeError(const std::string& op, const Value& a, const Value& b) {
  Fail("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() +
       "'");
}

bool Floats(const Value& a, const Value& b) {
  return a.kind() == K::kFloat || b.kind() == K::kFloat;
}

// str + str (Markup + str escapes the str), list + list, tuple + tuple,
// numbers.
Value Add(Interpreter& in, const Value& a, const Value& b) {
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && Floats(a, b);
  if (a.is_string() && b.is_string()) {
    if (a.is_markup() != b.is_markup()) {
      // Markup + str escapes the str (markupsafe), either way round.
      const std::string left = a.is_markup() ? a.str() : HtmlEscape(a.str());
      const std::string right = b.is_markup() ? b.str() : HtmlEscape(b.str());
      in.Charge(left.size() + right.size());
      return Value::Markup(left + right);
    }
    in.Charge(a.str().size() + b.str().size());
    return a.is_markup() ? Value::Markup(a.str() + b.str()) : Value::Str(a.str() + b.str());
  }
  if (a.is_list() && b.is_list() && !a.list().generator && !b.list().generator &&
      a.list().tuple == b.list().tuple) {
    std::vector<Value> items = a.list().items;
    in.ChargeSlots((items.size() + b.list().items.size()));
    items.insert(items.end(), b.list().items.begin(), b.list().items.end());
    return Value::MakeList(std::move(items), a.list().tuple);
  }
  if (!numbers) TypeError("+", a, b);
  if (floats) return Value::Float(a.number() + b.number());
  int64_t r = 0;
  if (__builtin_add_overflow(a.integer(), b.integer(), &r)) Overflow();
  return Value::Int(r);
}

// Numbers, or a string / list repeated (size checked before it is built).
Value Multiply(Interpreter& in, const Value& a, const Value& b) {
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && Floats(a, b);
  const Value* seq = a.is_string() || a.is_list()   ? &a
                     : b.is_string() || b.is_list() ? &b
                                                    : nullptr;
  const Value* count = seq == &a ? &b : &a;
  if (seq != nullptr) {
    if (count->kind() != K::kInt && count->kind() != K::kBool) TypeError("*", a, b);
    if (seq->is_list() && seq->list().generator) TypeError("*", a, b);
    const int64_t times = std::max<int64_t>(0, count->integer());
    const size_t unit = seq->is_string() ? seq->str().size() : seq->list().items.size();
    // Checked before multiplying, so that no count can overflow the size.
    const uint64_t cap =
        seq->is_string() ? in.max_value_bytes() : in.max_total_bytes() / sizeof(Value);
    const size_t total = unit == 0 ? 0
                         : static_cast<uint64_t>(times) > cap / unit
                             ? cap + 1
                             : unit * static_cast<size_t>(times);
    if (seq->is_string()) {
      in.Charge(total);
    } else {
      in.ChargeSlots(total);
    }
    if (seq->is_string()) {
      std::string s;
      s.reserve(unit * times);
      for (int64_t i = 0; i < times; ++i) s += seq->str();
      return Value::Str(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < times; ++i) {
      items.insert(items.end(), seq->list().items.begin(), seq->list().items.end());
    }
    return Value::MakeList(std::move(items), seq->list().tuple);
  }
  if (!numbers) TypeError("*", a, b);
  if (floats) return Value::Float(a.number() * b.number());
  int64_t r = 0;
  if (__builtin_mul_overflow(a.integer(), b.integer(), &r)) Overflow();
  return Value::Int(r);
}

// - / // % ** on numbers, with Python's floor semantics for // and %.
Value Arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && Floats(a, b);
  if (!numbers) TypeError(op, a, b);
  if (op == "-") {
    if (floats) return Value::Float(a.number() - b.number());
    int64_t r = 0;
    if (__builtin_sub_overflow(a.integer(), b.integer(), &r)) Overflow();
    return Value::Int(r);
  }
  if (op == "/") {
    if (b.number() == 0) Fail("division by zero");
    return Value::Float(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (b.number() == 0) Fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (floats) {
      const double q = std::floor(a.number() / b.number());
      if (op == "//") return Value::Float(q);
      double m = std::fmod(a.number(), b.number());
      if (m != 0 && ((m < 0) != (b.number() < 0))) m += b.number();
      return Value::Float(m);
    }
    const int64_t x = a.integer();
    const int64_t y = b.integer();
    if (x == INT64_MIN && y == -1)
      Fail("integer overflow (values beyond 64 bits are not supported)");
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value::Int(op == "//" ? q : m);
  }
  if (op == "**") {
    if (!floats && b.integer() >= 0) {
      const int64_t base = a.integer();
      if (base == 0 || base == 1) return Value::Int(b.integer() == 0 ? 1 : base);
      if (base == -1) return Value::Int(b.integer() % 2 == 0 ? 1 : -1);
      int64_t r = 1;  // |base| >= 2: overflows within 63 multiplications
      for (int64_t i = 0; i < b.integer(); ++i) {
        if (__builtin_mul_overflow(r, base, &r)) Overflow();
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.number(), b.number()));
  }
  TypeError(op, a, b);
}

}  // namespace

Value UnaryOperator(const std::string& op, const Value& v) {
  if (!v.is_number()) Fail("bad operand type for unary " + op + ": '" + v.TypeName() + "'");
  if (op == "+") return v.kind() == K::kBool ? Value::Int(v.integer()) : v;
  if (v.kind() == K::kFloat) return Value::Float(-v.number());
  if (v.integer() == INT64_MIN) Overflow();
  return Value::Int(-v.integer());
}

Value BinaryOperator(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    Fail("undefined value in '" + op + "' (jinja2's Undefined supports no arithmetic)");
  }
  if (op == "+") return Add(in, a, b);
  if (op == "*") return Multiply(in, a, b);
  return Arithmetic(op, a, b);
}

}  // namespace dikkat::chat
