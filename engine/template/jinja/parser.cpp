// parser.cpp — recursive-descent parser for Jinja statements and expressions, mirroring
// jinja2.parser so precedence and tuple/filter/test binding agree with the reference.
#include "engine/template/jinja/parser.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace spark::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const Limits& limits) : t_(tokens), limits_(limits) {}

  Body parse_all() {
    Body body = parse_body({});
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::OP && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::NAME && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case TokenType::TEXT: return "template text";
      case TokenType::VAR_BEGIN: return "'{{'";
      case TokenType::VAR_END: return "end of print statement";
      case TokenType::BLOCK_BEGIN: return "'{%'";
      case TokenType::BLOCK_END: return "end of statement block";
      case TokenType::STRING: return "string literal";
      case TokenType::END_OF_INPUT: return "end of template";
      default: return "'" + tok.value + "'";
    }
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw TemplateError("template syntax error, line " + std::to_string(cur().line) + ": " + msg,
                        TemplateError::Kind::SYNTAX);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_name(const char* n) {
    if (!skip_name(n)) fail(std::string("expected '") + n + "', got " + describe(cur()));
  }
  std::string expect_identifier() {
    if (cur().type != TokenType::NAME) fail("expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BLOCK_END) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_parse_depth)
        p.fail("template nested too deeply (more than " + std::to_string(p.limits_.max_parse_depth) + " levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr make(ExprKind k) { return std::make_unique<Expr>(k, cur().line); }

  // Chains like `a ~ b ~ c ...` or `x|f|f|f ...` grow the tree without nesting in the
  // source; bounding the tree's height keeps evaluation and destruction off deep recursion.
  ExprPtr finish(ExprPtr e) {
    int d = 0;
    auto see = [&](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->a), see(e->b), see(e->c), see(e->star_args), see(e->star_kwargs);
    for (const auto& c : e->items) see(c);
    for (const auto& c : e->args) see(c);
    for (const auto& kv : e->kwargs) see(kv.second);
    e->depth = d + 1;
    if (e->depth > 4 * limits_.max_parse_depth)
      fail("expression too deeply nested or chained (more than " + std::to_string(4 * limits_.max_parse_depth) + " levels)");
    return e;
  }

  // ---- statements ----
  // Parses until a `{% name %}` with name in `ends`; leaves the name token current.
  Body parse_body(std::initializer_list<const char*> ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TokenType::END_OF_INPUT) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("unexpected end of template, expected " + want);
      }
      if (tok.type == TokenType::TEXT) {
        auto s = std::make_unique<Stmt>(StmtKind::TEXT, tok.line);
        s->text = tok.value;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::VAR_BEGIN) {
        next();
        auto s = std::make_unique<Stmt>(StmtKind::PRINT, tok.line);
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::VAR_END) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::BLOCK_BEGIN) {
        next();
        if (cur().type != TokenType::NAME) fail("expected a statement name, got " + describe(cur()));
        for (const char* e : ends)
          if (cur().value == e) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  StmtPtr parse_statement() {
    std::string name = cur().value;
    int line = cur().line;
    next();
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "call") return parse_call_block(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "with") return parse_with(line);
    if (name == "print") {
      auto s = std::make_unique<Stmt>(StmtKind::PRINT, line);
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
      expect_block_end();
      return std::make_unique<Stmt>(name == "break" ? StmtKind::BREAK : StmtKind::CONTINUE, line);
    }
    if (name == "block" || name == "generation") {
      auto s = std::make_unique<Stmt>(StmtKind::SCOPE, line);
      if (name == "block") {
        expect_identifier();
        skip_name("scoped");
        skip_name("required");
      }
      expect_block_end();
      std::string end = "end" + name;
      s->body = parse_body({end.c_str()});
      next();
      if (name == "block" && cur().type == TokenType::NAME) next();
      expect_block_end();
      return s;
    }
    if (name == "extends" || name == "include" || name == "import" || name == "from")
      fail("'" + name + "' is not supported: chat templates cannot load other templates");
    fail("encountered unknown tag '" + name + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::IF, line);
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {}, false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      std::string tag = cur().value;
      next();
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        next();
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::FOR, line);
    s->target = parse_assign_target({"in"});
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (cur().value == "else") {
      next();
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    ExprPtr target;
    if (cur().type == TokenType::NAME && peek().type == TokenType::OP && peek().value == ".") {
      target = make(ExprKind::GETATTR);
      auto ns = make(ExprKind::NAME);
      ns->name = expect_identifier();
      next();  // '.'
      target->name = expect_identifier();
      target->a = std::move(ns);
    } else {
      target = parse_assign_target({});
    }
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(StmtKind::SET, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = std::make_unique<Stmt>(StmtKind::SET_BLOCK, line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter_chain(nullptr, false);
    expect_block_end();
    s->body = parse_body({"endset"});
    next();
    expect_block_end();
    return s;
  }

  std::vector<Param> parse_params() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_identifier();
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value) fail("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    next();
    return params;
  }

  // Which of varargs / kwargs / caller the tokens since `start` name (jinja2 looks for
  // them anywhere in the body, nested macros included).
  void note_special_names(Stmt& s, size_t start) const {
    for (size_t i = start; i < pos_ && i < t_.size(); ++i) {
      if (t_[i].type != TokenType::NAME) continue;
      s.uses_varargs = s.uses_varargs || t_[i].value == "varargs";
      s.uses_kwargs = s.uses_kwargs || t_[i].value == "kwargs";
      s.uses_caller = s.uses_caller || t_[i].value == "caller";
    }
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::MACRO, line);
    s->text = expect_identifier();
    s->params = parse_params();
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    const size_t body_start = pos_;
    s->body = parse_body({"endmacro"});
    note_special_names(*s, body_start);
    loop_depth_ = saved;
    next();
    if (cur().type == TokenType::NAME) next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::CALL_BLOCK, line);
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::CALL) fail("expected a call after 'call'");
    expect_block_end();
    const size_t body_start = pos_;
    s->body = parse_body({"endcall"});
    note_special_names(*s, body_start);
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::FILTER_BLOCK, line);
    s->filter = parse_filter_chain(nullptr, true);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::WITH, line);
    while (cur().type != TokenType::BLOCK_END) {
      if (!s->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target({});
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    next();
    s->body = parse_body({"endwith"});
    next();
    expect_block_end();
    return s;
  }

  // A name or a tuple of names (for loops, set).
  ExprPtr parse_assign_target(std::initializer_list<const char*> extra_end) {
    ExprPtr target = parse_tuple(true, true, extra_end, false);
    auto check = [&](const Expr& e) {
      if (e.kind != ExprKind::NAME) fail("can't assign to this expression");
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" ||
          e.name == "False" || e.name == "None")
        fail("can't assign to '" + e.name + "'");
    };
    if (target->kind == ExprKind::TUPLE) {
      for (auto& item : target->items) check(*item);
    } else {
      check(*target);
    }
    return target;
  }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == TokenType::VAR_END || cur().type == TokenType::BLOCK_END ||
        cur().type == TokenType::END_OF_INPUT)
      return true;
    if (is_op(")")) return true;
    for (const char* e : extra_end)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parentheses) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified) args.push_back(parse_primary());
      else args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail("expected an expression, got " + describe(cur()));
    }
    auto t = std::make_unique<Expr>(ExprKind::TUPLE, line);
    t->items = std::move(args);
    return finish(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      auto c = make(ExprKind::CONDITIONAL);
      next();
      c->b = parse_or();
      if (skip_name("else")) c->c = parse_condexpr();
      c->a = std::move(expr);
      expr = finish(std::move(c));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, int line) {
    auto e = std::make_unique<Expr>(kind, line);
    e->a = std::move(left);
    e->b = std::move(right);
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::OR, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::AND, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(ExprKind::UNARY);
      next();
      e->unary_op = UnaryOp::NOT;
      e->a = parse_not();
      return finish(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<BinaryOp> ops;
    while (true) {
      BinaryOp op;
      if (cur().type == TokenType::OP && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                          cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        const std::string& v = cur().value;
        op = v == "==" ? BinaryOp::EQ : v == "!=" ? BinaryOp::NE : v == "<" ? BinaryOp::LT
           : v == "<=" ? BinaryOp::LE : v == ">" ? BinaryOp::GT : BinaryOp::GE;
        next();
      } else if (is_name("in")) {
        op = BinaryOp::IN;
        next();
      } else if (is_name("not") && peek().type == TokenType::NAME && peek().value == "in") {
        op = BinaryOp::NOT_IN;
        next();
        next();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = std::make_unique<Expr>(ExprKind::COMPARE, line);
    e->items.push_back(std::move(first));
    for (auto& o : operands) e->items.push_back(std::move(o));
    e->compare_ops = std::move(ops);
    return finish(std::move(e));
  }

  ExprPtr binop(BinaryOp op, ExprPtr left, ExprPtr right, int line) {
    auto e = binary(ExprKind::BINARY, std::move(left), std::move(right), line);
    e->binary_op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      BinaryOp op = is_op("+") ? BinaryOp::ADD : BinaryOp::SUB;
      int line = cur().line;
      next();
      left = binop(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      left = binop(BinaryOp::CONCAT, std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& v = cur().value;
      BinaryOp op = v == "*" ? BinaryOp::MUL : v == "/" ? BinaryOp::DIV : v == "//" ? BinaryOp::FLOORDIV : BinaryOp::MOD;
      int line = cur().line;
      next();
      left = binop(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      left = binop(BinaryOp::POW, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(ExprKind::UNARY);
      e->unary_op = is_op("-") ? UnaryOp::NEG : UnaryOp::POS;
      next();
      e->a = parse_unary(false);
      node = finish(std::move(e));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == TokenType::NAME) {
      auto e = std::make_unique<Expr>(ExprKind::CONST, line);
      const std::string& n = tok.value;
      if (n == "true" || n == "True") e->constant = Value::boolean(true);
      else if (n == "false" || n == "False") e->constant = Value::boolean(false);
      else if (n == "none" || n == "None") e->constant = Value::none();
      else {
        e->kind = ExprKind::NAME;
        e->name = n;
      }
      next();
      return e;
    }
    if (tok.type == TokenType::STRING) {
      std::string s;
      while (cur().type == TokenType::STRING) {
        s += cur().value;
        next();
      }
      auto e = std::make_unique<Expr>(ExprKind::CONST, line);
      e->constant = Value::string(std::move(s));
      return e;
    }
    if (tok.type == TokenType::INTEGER || tok.type == TokenType::FLOAT) {
      auto e = std::make_unique<Expr>(ExprKind::CONST, line);
      try {
        if (tok.type == TokenType::INTEGER) e->constant = Value::integer(std::stoll(tok.value));
        else e->constant = Value::floating(std::stod(tok.value));
      } catch (const std::out_of_range&) {
        if (tok.type == TokenType::INTEGER) fail("integer literal too large");
        e->constant = Value::floating(tok.value.find("e-") != std::string::npos ? 0.0 : HUGE_VAL);
      }
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprKind::LIST);
      next();
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      next();
      return finish(std::move(e));
    }
    if (is_op("{")) {
      auto e = make(ExprKind::DICT);
      next();
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      next();
      return finish(std::move(e));
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::NAME) {
        auto e = std::make_unique<Expr>(ExprKind::GETATTR, line);
        e->name = cur().value;
        e->a = std::move(node);
        next();
        return finish(std::move(e));
      }
      if (cur().type == TokenType::INTEGER) {
        auto e = std::make_unique<Expr>(ExprKind::GETITEM, line);
        auto idx = std::make_unique<Expr>(ExprKind::CONST, line);
        try {
          idx->constant = Value::integer(std::stoll(cur().value));
        } catch (const std::out_of_range&) {
          fail("integer literal too large");
        }
        e->a = std::move(node);
        e->b = std::move(idx);
        next();
        return finish(std::move(e));
      }
      fail("expected name or number after '.'");
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    next();
    auto e = std::make_unique<Expr>(ExprKind::GETITEM, line);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      auto t = std::make_unique<Expr>(ExprKind::TUPLE, line);
      t->items = std::move(args);
      e->b = finish(std::move(t));
    }
    return finish(std::move(e));
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> parts;
    if (skip_op(":")) {
      parts.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!skip_op(":")) return node;
      parts.push_back(std::move(node));
    }
    if (is_op(":")) parts.push_back(nullptr);
    else if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto s = std::make_unique<Expr>(ExprKind::SLICE, line);
    s->items = std::move(parts);
    return finish(std::move(s));
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        call.star_args = parse_expression(true);
      } else if (is_op("**")) {
        next();
        call.star_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::NAME && peek().type == TokenType::OP && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        call.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
        call.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::CALL);
    e->a = std::move(node);
    parse_call_args(*e);
    return finish(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string n = expect_identifier();
    while (is_op(".") && peek().type == TokenType::NAME) {
      next();
      n += "." + cur().value;
      next();
    }
    return n;
  }

  // `| name(args) | name ...`; `start_inline` parses the first filter without a pipe.
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto f = make(ExprKind::FILTER);
      f->name = parse_dotted_name();
      if (is_op("(")) parse_call_args(*f);
      f->a = std::move(node);
      node = finish(std::move(f));
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(ExprKind::TEST);
    next();  // 'is'
    if (skip_name("not")) e->negated = true;
    e->name = parse_dotted_name();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == TokenType::NAME || cur().type == TokenType::STRING ||
                cur().type == TokenType::INTEGER || cur().type == TokenType::FLOAT || is_op("(") ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    e->a = std::move(node);
    return finish(std::move(e));
  }

  const std::vector<Token>& t_;
  const Limits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const Limits& limits) {
  return Parser(tokens, limits).parse_all();
}

}  // namespace spark::jinja
