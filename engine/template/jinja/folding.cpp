// folding.cpp — jinja2's compile-time constant folding, where it can be observed.
//
// jinja2's optimizer evaluates every expression built only from literals while compiling
// (Node.as_const) and keeps the result when Python can write it back as a literal (None,
// bools, numbers, strings, and lists, tuples and dicts of those); a `{{ }}` whose whole
// expression is constant is printed at compile time whatever its value. An error while
// folding leaves the expression to run time. For almost every expression the folded value
// is the one run time would produce, so folding changes nothing. The exception is slicing:
// the compiled code slices with Python's [a:b] directly (a TypeError for None, numbers,
// dicts), but folding goes through environment.getitem, which turns that TypeError into an
// undefined value. So `{{ (none)[0:1] }}` prints nothing and `(none)[0:1] | string` is ''
// where `x[0:1]` with x = none raises. sparkd folds the same expressions the same way.
#include <unordered_set>

#include "engine/template/jinja/evaluator.h"

namespace spark::jinja {
namespace {

// jinja2 cannot fold filters that take the render context (pass_context): select and
// friends look filters and tests up at run time.
bool context_filter(const std::string& name) {
  static const std::unordered_set<std::string> names = {"map", "select", "reject", "selectattr", "rejectattr"};
  return names.count(name) > 0;
}

// Python's has_safe_repr: what the compiler can write back into the template's code.
bool literal_value(const Value& v) {
  switch (v.kind()) {
    case Kind::NONE:
    case Kind::BOOL:
    case Kind::INT:
    case Kind::FLOAT:
    case Kind::STRING: return true;
    case Kind::LIST:
    case Kind::TUPLE:
      if (v.view() != DictView::NONE) return false;
      for (const Value& item : v.items())
        if (!literal_value(item)) return false;
      return true;
    case Kind::DICT:
      for (const auto& [k, val] : v.as_dict().entries)
        if (!literal_value(k) || !literal_value(val)) return false;
      return true;
    default: return false;
  }
}

ExprPtr constant(const Expr& where, Value v) {
  auto e = std::make_unique<Expr>(ExprKind::CONST, where.line);
  e->constant = std::move(v);
  return e;
}

void fold_children(Evaluator& ev, Expr& e);

// Replaces `slot` by its value when it folds to a literal; otherwise tries its parts.
void fold_expr(Evaluator& ev, ExprPtr& slot) {
  if (!slot || slot->kind == ExprKind::CONST) return;
  if (slot->kind != ExprKind::SLICE) {
    if (auto v = ev.try_fold(*slot); v && literal_value(*v)) {
      slot = constant(*slot, std::move(*v));
      return;
    }
  }
  fold_children(ev, *slot);
}

void fold_children(Evaluator& ev, Expr& e) {
  fold_expr(ev, e.a);
  fold_expr(ev, e.b);
  fold_expr(ev, e.c);
  for (auto& item : e.items) fold_expr(ev, item);
  for (auto& arg : e.args) fold_expr(ev, arg);
  for (auto& kw : e.kwargs) fold_expr(ev, kw.second);
  fold_expr(ev, e.star_args);
  fold_expr(ev, e.star_kwargs);
}

void fold_body(Evaluator& ev, Body& body);

void fold_stmt(Evaluator& ev, Stmt& s) {
  if (s.kind == StmtKind::PRINT && s.expr && s.expr->kind != ExprKind::CONST) {
    // A constant output is printed as it folds, literal or not (an undefined prints "").
    if (auto v = ev.try_fold(*s.expr)) {
      s.expr = constant(*s.expr, std::move(*v));
      return;
    }
  }
  fold_expr(ev, s.expr);
  // Targets are assigned, not evaluated (a namespace's object is a name: nothing to fold).
  // A loop's `if` is an expression; a set or filter block's filter chain has no subject of
  // its own to fold, only arguments.
  if (s.kind == StmtKind::FOR) fold_expr(ev, s.filter);
  else if (s.filter) fold_children(ev, *s.filter);
  for (auto& branch : s.branches) {
    fold_expr(ev, branch.first);
    fold_body(ev, branch.second);
  }
  for (auto& p : s.params) fold_expr(ev, p.default_value);
  for (auto& a : s.assignments) fold_expr(ev, a.second);
  fold_body(ev, s.body);
  fold_body(ev, s.else_body);
}

void fold_body(Evaluator& ev, Body& body) {
  for (auto& s : body) fold_stmt(ev, *s);
}

}  // namespace

bool Evaluator::not_foldable_filter(const Expr& e) const { return !e.a || context_filter(e.name); }

std::optional<Value> Evaluator::try_fold(const Expr& e) {
  folding_ = true;
  std::optional<Value> out;
  try {
    out = eval(e, std::make_shared<Scope>());
  } catch (const NotConstant&) {
  } catch (const std::exception&) {  // an error while folding: left to run time, as jinja2 does
  }
  folding_ = false;
  return out;
}

Value Evaluator::fold_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  // environment.getitem(obj, slice): TypeError (and LookupError) become an undefined value;
  // Undefined's own __getitem__ and other errors (a zero step) stop the folding.
  if (obj.is_undefined()) throw NotConstant{};
  if (!obj.is_string() && !obj.is_sequence()) return Value::undefined("");
  auto index_like = [](const Value* x) { return !x || x->is_none() || x->is_int() || x->is_bool(); };
  if (!index_like(start) || !index_like(stop) || !index_like(step)) return Value::undefined("");
  return slice_value(obj, start, stop, step);
}

void fold_constants(Body& body, const Limits& limits) {
  Evaluator ev(limits);
  NamespaceArena arena;
  fold_body(ev, body);
}

}  // namespace spark::jinja
