// scoping.cpp — which names start out undefined in each scope, decided before rendering the
// way jinja2's compiler decides it (its idtracking module), so that sparkd reads the same
// variables jinja2 does.
//
// jinja2 compiles every scope (the template, a loop body, a loop's else, a macro or call
// block, a set or filter block, a with block) to Python locals. Walking a scope's statements
// in order, the first mention of a name fixes where the local starts from:
//   * read first, or a name some enclosing scope knows: its outer value, as sparkd's lookup
//     through the parent scopes already gives;
//   * assigned first (set, for target of a nested tuple, macro name, ...) and unknown to every
//     enclosing scope: undefined ("missing") from the start of the scope, even where the
//     template reads it before the assignment and a variable of that name exists outside.
// Assignments inside `if` branches never count as first mentions of that kind (jinja2 makes
// them resolve to the outer value), and the bodies of nested scopes are not part of the
// enclosing scope's walk, only the expressions evaluated there (a loop's iterable, a filter
// block's filter, a call block's call, a with block's values).
//
// The result is Stmt::fresh / Stmt::else_fresh and the template's root list: names the
// evaluator sets to an undefined value when it enters that scope.
#include "engine/template/jinja/scoping.h"

#include <map>
#include <set>

namespace spark::jinja {
namespace {

enum class Load { PARAM, RESOLVE, ALIAS, UNDEFINED };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Load> refs;  // names this scope has a local for, and where it starts
  std::set<std::string> stores;

  bool knows(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(name)) return true;
    return false;
  }
  void load(const std::string& name) {
    if (!knows(name)) refs[name] = Load::RESOLVE;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (refs.count(name)) return;
    refs[name] = parent && parent->knows(name) ? Load::ALIAS : Load::UNDEFINED;
  }
  void param(const std::string& name) {
    stores.insert(name);
    refs[name] = Load::PARAM;
  }
  // After an `if`: what its branches (each walked on its own copy) defined becomes this
  // scope's, and a name first assigned in a branch starts from its outer value.
  void merge_branches(const std::vector<Symbols>& branches) {
    std::set<std::string> assigned;
    for (const Symbols& b : branches) assigned.insert(b.stores.begin(), b.stores.end());
    for (const std::string& name : stores) assigned.erase(name);
    for (const Symbols& b : branches) {
      for (const auto& [name, load] : b.refs) refs[name] = load;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const std::string& name : assigned) refs[name] = parent && parent->knows(name) ? Load::ALIAS : Load::RESOLVE;
  }
  std::vector<std::string> undefined_at_start() const {
    std::vector<std::string> out;
    for (const auto& [name, load] : refs)
      if (load == Load::UNDEFINED) out.push_back(name);
    return out;
  }
};

void load_expr(Symbols& sym, const Expr* e) {
  if (!e) return;
  if (e->kind == ExprKind::NAME) {
    sym.load(e->name);
    return;
  }
  load_expr(sym, e->a.get());
  load_expr(sym, e->b.get());
  load_expr(sym, e->c.get());
  for (const auto& item : e->items) load_expr(sym, item.get());
  for (const auto& arg : e->args) load_expr(sym, arg.get());
  for (const auto& kw : e->kwargs) load_expr(sym, kw.second.get());
  load_expr(sym, e->star_args.get());
  load_expr(sym, e->star_kwargs.get());
}

void store_target(Symbols& sym, const Expr& target) {
  if (target.kind == ExprKind::NAME) sym.store(target.name);
  else if (target.kind == ExprKind::GETATTR) load_expr(sym, target.a.get());  // ns.attr reads ns
  else
    for (const auto& item : target.items) store_target(sym, *item);
}

void param_target(Symbols& sym, const Expr& target) {
  if (target.kind == ExprKind::NAME) sym.param(target.name);
  else
    for (const auto& item : target.items) param_target(sym, *item);
}

void walk_body(Symbols& sym, const Body& body);

// One statement as the enclosing scope sees it (jinja2's FrameSymbolVisitor).
void walk(Symbols& sym, const Stmt& s) {
  switch (s.kind) {
    case StmtKind::PRINT: load_expr(sym, s.expr.get()); return;
    case StmtKind::IF: {
      load_expr(sym, s.branches[0].first.get());
      std::vector<Symbols> branches(3, sym);
      walk_body(branches[0], s.branches[0].second);
      for (size_t i = 1; i < s.branches.size(); ++i) {
        load_expr(branches[1], s.branches[i].first.get());
        walk_body(branches[1], s.branches[i].second);
      }
      walk_body(branches[2], s.else_body);
      sym.merge_branches(branches);
      return;
    }
    case StmtKind::FOR: load_expr(sym, s.expr.get()); return;
    case StmtKind::SET:
      load_expr(sym, s.expr.get());
      store_target(sym, *s.target);
      return;
    case StmtKind::SET_BLOCK: store_target(sym, *s.target); return;
    case StmtKind::MACRO: sym.store(s.text); return;
    case StmtKind::CALL_BLOCK: load_expr(sym, s.expr.get()); return;
    case StmtKind::FILTER_BLOCK: load_expr(sym, s.filter.get()); return;
    case StmtKind::WITH:
      for (const auto& a : s.assignments) load_expr(sym, a.second.get());
      return;
    case StmtKind::TEXT:
    case StmtKind::BREAK:
    case StmtKind::CONTINUE:
    case StmtKind::SCOPE: return;
  }
}

void walk_body(Symbols& sym, const Body& body) {
  for (const auto& s : body) walk(sym, *s);
}

void analyze_body(Body& body, const Symbols& sym);

void analyze_params(Symbols& frame, Stmt& s) {
  for (const Param& p : s.params) frame.param(p.name);
  for (const char* special : {"varargs", "kwargs", "caller"}) frame.param(special);
  for (const Param& p : s.params) load_expr(frame, p.default_value.get());
}

// The scopes a statement opens, with `outer` the (complete) symbols of the scope it is in.
void analyze_stmt(Stmt& s, const Symbols& outer) {
  Symbols frame;
  frame.parent = &outer;
  switch (s.kind) {
    case StmtKind::IF:
      for (auto& branch : s.branches) analyze_body(branch.second, outer);
      analyze_body(s.else_body, outer);
      return;
    case StmtKind::FOR: {
      param_target(frame, *s.target);
      frame.param("loop");
      walk_body(frame, s.body);
      s.fresh = frame.undefined_at_start();
      analyze_body(s.body, frame);
      Symbols else_frame;
      else_frame.parent = &outer;
      walk_body(else_frame, s.else_body);
      s.else_fresh = else_frame.undefined_at_start();
      analyze_body(s.else_body, else_frame);
      return;
    }
    case StmtKind::MACRO:
    case StmtKind::CALL_BLOCK: analyze_params(frame, s); break;
    case StmtKind::WITH:
      for (const auto& a : s.assignments) store_target(frame, *a.first);
      break;
    case StmtKind::SET_BLOCK:
    case StmtKind::FILTER_BLOCK:
    case StmtKind::SCOPE: break;
    default: return;
  }
  walk_body(frame, s.body);
  s.fresh = frame.undefined_at_start();
  analyze_body(s.body, frame);
}

void analyze_body(Body& body, const Symbols& sym) {
  for (auto& s : body) analyze_stmt(*s, sym);
}

}  // namespace

std::vector<std::string> analyze_scopes(Body& body) {
  Symbols root;
  walk_body(root, body);
  analyze_body(body, root);
  return root.undefined_at_start();
}

}  // namespace spark::jinja
