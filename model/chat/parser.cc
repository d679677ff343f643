#include "model/chat/parser.h"

#include <initializer_list>
#include <string>
#include <utility>

namespace dikkat::chat {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    if (Cur().type != T::kEnd) Error("unexpected '" + Cur().value + "'");
    return body;
  }

 private:
  // Counts nesting; the parser recurses on untrusted input.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) {
        p_->Error("nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)");
      }
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t k = 1) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().value == op; }
  bool IsName(const char* name) const { return Cur().type == T::kName && Cur().value == name; }
  bool AcceptOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  [[noreturn]] void Error(const std::string& message) const {
    const Token& t = Cur();
    throw TemplateError{
        TemplateError::Kind::kInvalid,
        "line " + std::to_string(t.line) + ", column " + std::to_string(t.column) + ": " + message,
        t.line};
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEnd:
        return "end of template";
      case T::kBlockEnd:
        return "'%}'";
      case T::kVarEnd:
        return "'}}'";
      case T::kText:
        return "text";
      default:
        return "'" + t.value + "'";
    }
  }
  void ExpectOp(const char* op) {
    if (!AcceptOp(op)) Error(std::string("expected '") + op + "', got " + Describe(Cur()));
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Error("expected a name, got " + Describe(Cur()));
    std::string name = Cur().value;
    Next();
    return name;
  }
  void ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) Error("expected '%}', got " + Describe(Cur()));
    Next();
  }

  ExprPtr MakeExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----------------------------------------------------------

  // Parses until `{% <one of end_tags> ...` (left unconsumed after the tag
  // name is checked: Cur() is that name) or the end of the template.
  Body ParseBody(std::initializer_list<const char*> end_tags) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == T::kEnd) {
        if (end_tags.size() > 0) Error(std::string("missing '{% ") + *end_tags.begin() + " %}'");
        return body;
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        Next();
      } else if (t.type == T::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        Next();
        s->expr = ParseTuple(true);
        if (Cur().type != T::kVarEnd) Error("expected '}}', got " + Describe(Cur()));
        Next();
        body.push_back(std::move(s));
      } else if (t.type == T::kBlockBegin) {
        const Token& name = Peek();
        for (const char* end : end_tags) {
          if (name.type == T::kName && name.value == end) {
            Next();
            return body;
          }
        }
        Next();
        body.push_back(ParseStatement());
      } else {
        Error("unexpected " + Describe(t));
      }
    }
  }

  std::unique_ptr<Stmt> ParseStatement() {
    if (Cur().type != T::kName) Error("expected a tag name, got " + Describe(Cur()));
    const std::string tag = Cur().value;
    auto s = std::make_unique<Stmt>();
    s->line = Cur().line;
    Next();
    if (tag == "if") {
      ParseIf(s.get());
    } else if (tag == "for") {
      ParseFor(s.get());
    } else if (tag == "set") {
      ParseSet(s.get());
    } else if (tag == "macro") {
      ParseMacro(s.get());
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      s->filter = ParseFilterChain(nullptr);
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"});
      EndTag();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Error("'" + tag + "' outside a loop");
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      ExpectBlockEnd();
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::kBlock;
      ExpectBlockEnd();
      s->body = ParseBody({"endgeneration"});
      EndTag();
    } else {
      Error("unsupported tag '" + tag + "'");
    }
    return s;
  }

  // After ParseBody stopped at an end tag's name: consume it and '%}'.
  void EndTag() {
    Next();
    ExpectBlockEnd();
  }

  void ParseIf(Stmt* s) {
    s->kind = Stmt::Kind::kIf;
    while (true) {
      ExprPtr cond = ParseTuple(false);
      ExpectBlockEnd();
      Body body = ParseBody({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string tag = Cur().value;
      Next();
      if (tag == "elif") continue;
      if (tag == "else") {
        ExpectBlockEnd();
        s->else_body = ParseBody({"endif"});
        EndTag();
      } else {
        ExpectBlockEnd();
      }
      return;
    }
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> targets;
    const bool paren = AcceptOp("(");
    do {
      targets.push_back(ExpectName());
    } while (AcceptOp(","));
    if (paren) ExpectOp(")");
    return targets;
  }

  void ParseFor(Stmt* s) {
    s->kind = Stmt::Kind::kFor;
    s->targets = ParseTargets();
    if (!AcceptName("in")) Error("expected 'in', got " + Describe(Cur()));
    s->expr = ParseTuple(false);
    if (AcceptName("if")) s->cond = ParseExpression(true);
    if (IsName("recursive")) Error("recursive loops are not supported");
    ExpectBlockEnd();
    ++loop_depth_;
    s->body = ParseBody({"else", "endfor"});
    --loop_depth_;
    const std::string tag = Cur().value;
    Next();
    ExpectBlockEnd();
    if (tag == "else") {
      s->else_body = ParseBody({"endfor"});
      EndTag();
    }
  }

  void ParseSet(Stmt* s) {
    if (Cur().type == T::kName && Peek().type == T::kOp && Peek().value == ".") {
      s->targets.push_back(ExpectName());
      Next();
      s->attr = ExpectName();
    } else {
      s->targets = ParseTargets();
    }
    if (AcceptOp("=")) {
      s->kind = Stmt::Kind::kSet;
      s->expr = ParseTuple(true);
      ExpectBlockEnd();
      return;
    }
    if (s->targets.size() != 1 || !s->attr.empty()) Error("a block set takes one plain name");
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) s->filter = ParseFilterChain(nullptr);
    ExpectBlockEnd();
    const int saved_loops = loop_depth_;
    s->body = ParseBody({"endset"});
    loop_depth_ = saved_loops;
    EndTag();
  }

  void ParseMacro(Stmt* s) {
    s->kind = Stmt::Kind::kMacro;
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = ExpectName();
    ExpectOp("(");
    while (!AcceptOp(")")) {
      if (!s->macro->params.empty()) ExpectOp(",");
      if (AcceptOp(")")) break;
      s->macro->params.push_back(ExpectName());
      s->macro->defaults.push_back(AcceptOp("=") ? ParseExpression(true) : nullptr);
    }
    ExpectBlockEnd();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro
    s->macro->body = ParseBody({"endmacro"});
    loop_depth_ = saved_loops;
    Next();
    if (Cur().type == T::kName) Next();  // {% endmacro name %}
    ExpectBlockEnd();
  }

  // `| f(args) | g ...` applied to `operand` (null: a block's output).
  ExprPtr ParseFilterChain(ExprPtr operand) {
    if (operand == nullptr && !IsOp("|")) {
      // {% filter trim %}: the first filter has no leading '|'.
      operand = ParseOneFilter(nullptr);
    }
    while (AcceptOp("|")) operand = ParseOneFilter(std::move(operand));
    return operand;
  }

  ExprPtr ParseOneFilter(ExprPtr operand) {
    auto e = MakeExpr(Expr::Kind::kFilter, Cur().line);
    e->name = ExpectName();
    while (IsOp(".")) {
      Next();
      e->name += "." + ExpectName();
    }
    e->args.push_back(std::move(operand));
    if (IsOp("(")) ParseCallArgs(e.get());
    return e;
  }

  // ---- expressions ---------------------------------------------------------

  ExprPtr ParseTuple(bool with_condexpr) {
    const int line = Cur().line;
    ExprPtr first = ParseExpression(with_condexpr);
    if (!IsOp(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")")) break;
      tuple->args.push_back(ParseExpression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    ExprPtr expr = ParseOr();
    if (!with_condexpr) return expr;
    while (IsName("if")) {
      const int line = Cur().line;
      Next();
      ExprPtr cond = ParseOr();
      ExprPtr otherwise = AcceptName("else") ? ParseExpression(true) : nullptr;
      auto e = MakeExpr(Expr::Kind::kCondExpr, line);
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = MakeExpr(Expr::Kind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const int line = Cur().line;
      Next();
      left = Binary("or", std::move(left), ParseAnd(), line);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const int line = Cur().line;
      Next();
      left = Binary("and", std::move(left), ParseNot(), line);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto e = MakeExpr(Expr::Kind::kUnary, Cur().line);
      Next();
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Cur().line;
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == T::kOp &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
           Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
        op = Cur().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == T::kName && Peek().value == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = MakeExpr(Expr::Kind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Cur().value;
      const int line = Cur().line;
      Next();
      left = Binary(op, std::move(left), ParseConcat(), line);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      const int line = Cur().line;
      Next();
      left = Binary("~", std::move(left), ParseMath2(), line);
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Cur().value;
      const int line = Cur().line;
      Next();
      left = Binary(op, std::move(left), ParsePow(), line);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const int line = Cur().line;
      Next();
      left = Binary("**", std::move(left), ParseUnary(true), line);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(Expr::Kind::kUnary, Cur().line);
      node->name = Cur().value;
      Next();
      node->args.push_back(ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
    switch (t.type) {
      case T::kName:
        if (t.value == "true" || t.value == "True") {
          e->literal = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.value;
        }
        Next();
        return e;
      case T::kString: {
        std::string s;
        while (Cur().type == T::kString) {  // adjacent literals concatenate
          s += Cur().value;
          Next();
        }
        e->literal = Value::Str(std::move(s));
        return e;
      }
      case T::kInt:
        e->literal = Value::Int(t.int_value);
        Next();
        return e;
      case T::kFloat:
        e->literal = Value::Float(t.float_value);
        Next();
        return e;
      case T::kOp:
        if (t.value == "(") return ParseParenthesized();
        if (t.value == "[") return ParseListLiteral();
        if (t.value == "{") return ParseDictLiteral();
        break;
      default:
        break;
    }
    Error("unexpected " + Describe(t));
  }

  ExprPtr ParseParenthesized() {
    const int line = Cur().line;
    Next();
    if (AcceptOp(")")) return MakeExpr(Expr::Kind::kTuple, line);
    ExprPtr first = ParseExpression(true);
    if (AcceptOp(")")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (IsOp(")")) break;
      tuple->args.push_back(ParseExpression(true));
    }
    ExpectOp(")");
    return tuple;
  }

  ExprPtr ParseListLiteral() {
    auto e = MakeExpr(Expr::Kind::kList, Cur().line);
    Next();
    while (!AcceptOp("]")) {
      if (!e->args.empty()) {
        ExpectOp(",");
        if (AcceptOp("]")) break;
      }
      e->args.push_back(ParseExpression(true));
    }
    return e;
  }

  ExprPtr ParseDictLiteral() {
    auto e = MakeExpr(Expr::Kind::kDict, Cur().line);
    Next();
    while (!AcceptOp("}")) {
      if (!e->dict_items.empty()) {
        ExpectOp(",");
        if (AcceptOp("}")) break;
      }
      ExprPtr key = ParseExpression(true);
      ExpectOp(":");
      e->dict_items.emplace_back(std::move(key), ParseExpression(true));
    }
    return e;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (AcceptOp(".")) {
        if (Cur().type == T::kInt) {
          auto e = MakeExpr(Expr::Kind::kGetItem, line);
          auto index = MakeExpr(Expr::Kind::kLiteral, line);
          index->literal = Value::Int(Cur().int_value);
          Next();
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        auto e = MakeExpr(Expr::Kind::kGetAttr, line);
        e->name = ExpectName();
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (AcceptOp("[")) {
        node = ParseSubscript(std::move(node), line);
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node, int line) {
    DepthGuard guard(this);
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!IsOp(":") && !IsOp("]")) parts[i] = ParseExpression(true);
      if (i < 2 && AcceptOp(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    ExpectOp("]");
    auto e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
    e->args.push_back(std::move(node));
    if (!is_slice && parts[0] == nullptr) Error("empty subscript");
    for (int i = 0; i < (is_slice ? 3 : 1); ++i) e->args.push_back(std::move(parts[i]));
    return e;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto e = MakeExpr(Expr::Kind::kCall, Cur().line);
    e->args.push_back(std::move(callee));
    ParseCallArgs(e.get());
    return e;
  }

  // `( positional..., name=value... )` into e->args (after those already
  // there) and e->kwargs.
  void ParseCallArgs(Expr* e) {
    DepthGuard guard(this);
    ExpectOp("(");
    bool first = true;
    while (!AcceptOp(")")) {
      if (!first) {
        ExpectOp(",");
        if (AcceptOp(")")) break;
      }
      first = false;
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().value == "=") {
        std::string name = Cur().value;
        Next();
        Next();
        e->kwargs.emplace_back(std::move(name), ParseExpression(true));
      } else {
        if (!e->kwargs.empty()) Error("positional argument after a keyword argument");
        e->args.push_back(ParseExpression(true));
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        node = ParseOneFilter(std::move(node));
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseTest(ExprPtr node) {
    auto e = MakeExpr(Expr::Kind::kTest, Cur().line);
    Next();  // is
    e->negated = AcceptName("not");
    e->name = ExpectName();
    while (IsOp(".")) {
      Next();
      e->name += "." + ExpectName();
    }
    e->args.push_back(std::move(node));
    if (IsOp("(")) {
      ParseCallArgs(e.get());
    } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt ||
                Cur().type == T::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      DepthGuard guard(this);
      e->args.push_back(ParsePostfix(ParsePrimary()));
    }
    return e;
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace dikkat::chat
