// The syntax tree of a parsed template. Immutable after parsing; a render
// only reads it, which is what makes ChatTemplate::Render thread-safe.
#ifndef DIKKAT_MODEL_CHAT_AST_H_
#define DIKKAT_MODEL_CHAT_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/value.h"

namespace dikkat::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items
    kDict,      // kwargs-like pairs in dict_items
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts absent)
    kCall,      // args[0](args[1:], kwargs)
    kFilter,    // args[0] | name(args[1:], kwargs); args[0] null in block filters
    kTest,      // args[0] is [not] name(args[1:]); negated
    kUnary,     // name: "-", "+", "not"
    kBinary,    // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondExpr,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null: no default
  Body body;
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (cond, body); else_body
    kFor,          // for targets in expr [if cond]: body; else_body
    kSet,          // set targets = expr, or set targets[0].attr = expr
    kSetBlock,     // set targets[0] [| filter]: body
    kFilterBlock,  // filter ...: body
    kMacro,        // macro
    kBreak,
    kContinue,
    kBlock,  // body run as is ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  ExprPtr filter;  // kSetBlock / kFilterBlock: a kFilter chain
  std::unique_ptr<MacroDef> macro;
};

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_AST_H_
