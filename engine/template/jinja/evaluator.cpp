// evaluator.cpp — walks the syntax tree: statements write text, expressions produce values.
// Scoping follows jinja2: each loop iteration, macro call and `with` gets a fresh scope,
// `if` does not; macros see their defining scope as it is when they run.
#include "engine/template/jinja/evaluator.h"

#include <optional>

#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {
namespace {

// An error that already names its template line, so outer statements don't add theirs.
struct LocatedError : TemplateError {
  using TemplateError::TemplateError;
};

[[noreturn]] void rethrow_located(const TemplateError& e, int line) {
  if (dynamic_cast<const LocatedError*>(&e)) throw;
  throw LocatedError("line " + std::to_string(line) + ": " + e.what(), e.kind);
}

}  // namespace

struct DepthGuard {
  Evaluator& ev;
  explicit DepthGuard(Evaluator& e) : ev(e) {
    if (++ev.depth_ > ev.limits_.max_eval_depth)
      throw TemplateError("template evaluation nested too deeply (more than " +
                          std::to_string(ev.limits_.max_eval_depth) + " levels)");
  }
  ~DepthGuard() { --ev.depth_; }
};

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

ScopePtr Scope::inside(const ScopePtr& parent, const std::vector<std::string>& fresh) {
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  for (const std::string& name : fresh) scope->vars[name] = make_undefined_name(name);
  return scope;
}

void Evaluator::charge_step() {
  if (++steps_ > limits_.max_steps)
    throw TemplateError("template exceeded its work budget (" + std::to_string(limits_.max_steps) +
                        " steps): a loop or recursion that does not end?");
}

void Evaluator::check_size(size_t bytes, const char* what) const {
  if (bytes > limits_.max_string_bytes)
    throw TemplateError(std::string(what) + " would be " + std::to_string(bytes) + " bytes, over the limit of " +
                        std::to_string(limits_.max_string_bytes));
}

void Evaluator::check_joinable(size_t before) {
  if (unjoinable_ == before) return;
  unjoinable_ = before;
  throw TemplateError("sequence item: expected str instance, " + unjoinable_type_ + " found");
}

std::string Evaluator::render_inner(const Stmt& s, const ScopePtr& scope) {
  ScopePtr inner = Scope::inside(scope, s.fresh);
  std::string text;
  const size_t unjoinable = unjoinable_;
  exec_body(s.body, inner, text);
  check_joinable(unjoinable);
  return text;
}

void Evaluator::append(std::string& out, const std::string& text) {
  output_bytes_ += text.size();
  if (output_bytes_ > limits_.max_output_bytes)
    throw TemplateError("template output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  charge_step();
  out += text;
}

std::string Evaluator::render(const Body& body, const Value& globals, const std::vector<std::string>& fresh) {
  NamespaceArena arena;
  root_ = std::make_shared<Scope>();
  Dict builtins;
  add_globals(builtins);
  for (const auto& [k, v] : builtins.entries) root_->vars[k.as_string()] = v;
  if (globals.is_dict())
    for (const auto& [k, v] : globals.as_dict().entries)
      if (k.is_string()) root_->vars[k.as_string()] = v;
  ScopePtr top = Scope::inside(root_, fresh);
  std::string out;
  const size_t unjoinable = unjoinable_;
  exec_body(body, top, out);
  check_joinable(unjoinable);
  root_.reset();
  return out;
}

Evaluator::Flow Evaluator::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::NORMAL) return f;
  }
  return Flow::NORMAL;
}

Evaluator::Flow Evaluator::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(*this);
  try {
    switch (s.kind) {
      case StmtKind::TEXT: append(out, s.text); return Flow::NORMAL;
      case StmtKind::PRINT: append(out, to_str(eval(*s.expr, scope))); return Flow::NORMAL;
      case StmtKind::IF:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        return exec_body(s.else_body, scope, out);
      case StmtKind::FOR: exec_for(s, scope, out, eval(*s.expr, scope), 0); return Flow::NORMAL;
      case StmtKind::SET: exec_set(s, scope, eval(*s.expr, scope)); return Flow::NORMAL;
      case StmtKind::SET_BLOCK: {
        Value v = Value::string(render_inner(s, scope));
        if (s.filter) v = apply_filter_chain(*s.filter, v, scope);
        exec_set(s, scope, v);
        return Flow::NORMAL;
      }
      case StmtKind::MACRO: scope->vars[s.text] = make_macro(s, scope, s.text); return Flow::NORMAL;
      case StmtKind::CALL_BLOCK: {
        CallArgs args = eval_args(*s.expr, scope);
        args.kwargs.emplace_back("caller", make_macro(s, scope, "caller"));
        Value callee = eval(*s.expr->a, scope);
        append(out, to_str(call(callee, args)));
        return Flow::NORMAL;
      }
      case StmtKind::FILTER_BLOCK: {
        Value filtered = apply_filter_chain(*s.filter, Value::string(render_inner(s, scope)), scope);
        // jinja2 yields the filter's result as it is into the output, which it joins as
        // strings when the enclosing buffer ends: a non-string fails then, not here.
        if (filtered.is_string()) {
          append(out, filtered.as_string());
        } else {
          ++unjoinable_;
          unjoinable_type_ = type_name(filtered);
        }
        return Flow::NORMAL;
      }
      case StmtKind::BREAK: return Flow::BREAK;
      case StmtKind::CONTINUE: return Flow::CONTINUE;
      case StmtKind::WITH: {
        ScopePtr inner = Scope::inside(scope, s.fresh);
        for (const auto& [target, value] : s.assignments) assign(*target, inner, eval(*value, scope));
        exec_body(s.body, inner, out);
        return Flow::NORMAL;
      }
      // jinja2 renders a block, and the call block transformers makes of `generation`, in a
      // scope of its own: names set inside stay inside.
      case StmtKind::SCOPE: return exec_body(s.body, Scope::inside(scope, s.fresh), out);
    }
  } catch (const TemplateError& e) {
    rethrow_located(e, s.line);
  }
  return Flow::NORMAL;
}

void Evaluator::exec_set(const Stmt& s, const ScopePtr& scope, Value value) {
  const Expr& target = *s.target;
  if (target.kind == ExprKind::GETATTR) {
    Value ns = eval(*target.a, scope);
    if (!ns.is_namespace() || !ns.as_dict().assignable)
      throw TemplateError("cannot assign attribute on non-namespace object");
    if (!target.name.empty() && target.name[0] == '_')
      throw TemplateError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                          target.name + "'. Please rename the attribute.");
    ns.as_dict().set(target.name, std::move(value));
    return;
  }
  assign(target, scope, value);
}

void Evaluator::assign(const Expr& target, const ScopePtr& scope, const Value& value) {
  if (target.kind == ExprKind::NAME) {
    scope->vars[target.name] = value;
    return;
  }
  ValueList parts = iterate(value);
  if (parts.size() != target.items.size())
    throw TemplateError(parts.size() > target.items.size()
                            ? "too many values to unpack (expected " + std::to_string(target.items.size()) + ")"
                            : "not enough values to unpack (expected " + std::to_string(target.items.size()) +
                                  ", got " + std::to_string(parts.size()) + ")");
  for (size_t i = 0; i < parts.size(); ++i) assign(*target.items[i], scope, parts[i]);
}

void Evaluator::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out, const Value& iterable, int depth) {
  ValueList items = iterate(iterable);
  if (s.filter) {
    ValueList kept;
    for (auto& item : items) {
      charge_step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(*s.target, probe, item);
      if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // jinja2 runs the else branch unless an iteration reached the end of the body: a loop whose
  // every pass ended in break or continue runs it too. It has its own scope, without the
  // loop variables.
  bool completed = false;
  auto run_else = [&] {
    if (!completed && !s.else_body.empty()) exec_body(s.else_body, Scope::inside(scope, s.else_fresh), out);
  };
  auto changed_last = std::make_shared<std::optional<Value>>();
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    charge_step();
    ScopePtr iter_scope = Scope::inside(scope, s.fresh);
    assign(*s.target, iter_scope, items[static_cast<size_t>(i)]);
    auto loop = std::make_shared<Dict>();
    loop->set("index", Value::integer(i + 1));
    loop->set("index0", Value::integer(i));
    loop->set("revindex", Value::integer(n - i));
    loop->set("revindex0", Value::integer(n - i - 1));
    loop->set("first", Value::boolean(i == 0));
    loop->set("last", Value::boolean(i == n - 1));
    loop->set("length", Value::integer(n));
    loop->set("depth", Value::integer(depth + 1));
    loop->set("depth0", Value::integer(depth));
    loop->set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop->set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    loop->set("cycle", Value::function("cycle", [i](CallArgs& a) {
      if (a.args.empty()) throw TemplateError("no items for cycling given");
      return a.args[static_cast<size_t>(i) % a.args.size()];
    }, "method"));
    loop->set("changed", Value::function("changed", [changed_last](CallArgs& a) {
      Value current = Value::tuple(a.args);
      if (changed_last->has_value() && equals(**changed_last, current)) return Value::boolean(false);
      *changed_last = current;
      return Value::boolean(true);
    }, "method"));
    if (s.recursive) {
      Evaluator* self = this;
      const Stmt* node = &s;
      std::weak_ptr<Scope> outer = scope;
      loop->set("__call__", Value::function("loop", [self, node, outer, depth](CallArgs& a) {
        if (a.args.size() != 1) throw TemplateError("loop() takes exactly one argument");
        ScopePtr sc = outer.lock();
        if (!sc) throw TemplateError("loop() called outside its loop");
        if (++self->macro_depth_ > self->limits_.max_macro_depth) {
          --self->macro_depth_;
          throw TemplateError("recursive loop nested too deeply (more than " +
                              std::to_string(self->limits_.max_macro_depth) + " levels)");
        }
        std::string text;
        try {
          self->exec_for(*node, sc, text, a.args[0], depth + 1);
        } catch (...) {
          --self->macro_depth_;
          throw;
        }
        --self->macro_depth_;
        return Value::string(std::move(text));
      }));
    }
    iter_scope->vars["loop"] = Value::object(loop);
    Flow f = exec_body(s.body, iter_scope, out);
    if (f == Flow::BREAK) break;
    if (f == Flow::NORMAL) completed = true;
  }
  run_else();
}

Value Evaluator::make_macro(const Stmt& s, const ScopePtr& scope, const std::string& name) {
  Evaluator* self = this;
  const Stmt* node = &s;
  std::weak_ptr<Scope> defining = scope;
  return Value::function(name, [self, node, defining, name](CallArgs& args) -> Value {
    ScopePtr parent = defining.lock();
    if (!parent) throw TemplateError("macro '" + name + "' called after its scope ended");
    if (self->macro_depth_ + 1 > self->limits_.max_macro_depth)
      throw TemplateError("macro '" + name + "' nested too deeply (more than " +
                          std::to_string(self->limits_.max_macro_depth) + " calls): recursion that does not end?");
    ScopePtr call_scope = Scope::inside(parent, node->fresh);
    const auto& params = node->params;
    std::vector<bool> bound(params.size(), false);
    ValueList extra;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < params.size()) {
        call_scope->vars[params[i].name] = args.args[i];
        bound[i] = true;
      } else {
        extra.push_back(args.args[i]);
      }
    }
    Value extra_kwargs = Value::dict();
    for (auto& [key, value] : args.kwargs) {
      bool matched = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != key) continue;
        if (bound[i]) throw TemplateError("macro '" + name + "' got multiple values for argument '" + key + "'");
        call_scope->vars[key] = value;
        bound[i] = matched = true;
      }
      if (!matched) {
        if (key == "caller" && node->uses_caller) call_scope->vars["caller"] = value;
        else extra_kwargs.as_dict().set(key, value);
      }
    }
    if (!node->uses_kwargs && extra_kwargs.as_dict().size() > 0) {
      const std::string key = extra_kwargs.as_dict().entries[0].first.as_string();
      throw TemplateError(key == "caller" ? "macro '" + name + "' was invoked with two values for the special caller argument"
                                          : "macro '" + name + "' takes no keyword argument '" + key + "'");
    }
    if (!node->uses_varargs && !extra.empty())
      throw TemplateError("macro '" + name + "' takes not more than " + std::to_string(params.size()) + " argument(s)");
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      call_scope->vars[params[i].name] = params[i].default_value ? self->eval(*params[i].default_value, call_scope)
                                                                 : Value::undefined("parameter '" + params[i].name +
                                                                                    "' was not provided");
    }
    call_scope->vars["varargs"] = Value::tuple(std::move(extra));
    call_scope->vars["kwargs"] = extra_kwargs;
    std::string text;
    ++self->macro_depth_;
    try {
      const size_t unjoinable = self->unjoinable_;
      self->exec_body(node->body, call_scope, text);
      self->check_joinable(unjoinable);
    } catch (...) {
      --self->macro_depth_;
      throw;
    }
    --self->macro_depth_;
    return Value::string(std::move(text));
  }, "jinja2.runtime.Macro");
}

Value Evaluator::lookup(const std::string& name, const ScopePtr& scope) {
  const Value* v = scope->find(name);
  return v ? *v : make_undefined_name(name);
}

CallArgs Evaluator::eval_args(const Expr& e, const ScopePtr& scope) {
  CallArgs args;
  for (const auto& a : e.args) args.args.push_back(eval(*a, scope));
  if (e.star_args)
    for (auto& v : iterate(eval(*e.star_args, scope))) args.args.push_back(std::move(v));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, scope));
  if (e.star_kwargs) {
    Value d = eval(*e.star_kwargs, scope);
    if (!d.is_dict()) throw TemplateError("argument after ** must be a mapping");
    for (const auto& [k, v] : d.as_dict().entries) args.kwargs.emplace_back(to_str(k), v);
  }
  return args;
}

Value Evaluator::apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope) {
  Value subject = chain.a ? apply_filter_chain(*chain.a, input, scope) : input;
  CallArgs args = eval_args(chain, scope);
  return apply_filter(chain.name, subject, args);
}

Value Evaluator::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw TemplateError("no filter named '" + name + "'");
  charge_step();
  return f(*this, subject, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw TemplateError("no test named '" + name + "'");
  return t(*this, subject, args);
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  charge_step();
  if (callee.is_callable()) return callee.callable().fn(args);
  if (callee.is_namespace()) {
    if (const Value* f = callee.as_dict().find(std::string("__call__")); f && f->is_callable())
      return f->callable().fn(args);
  }
  if (callee.is_undefined()) raise_undefined(callee, "an undefined value is not callable");
  throw TemplateError(std::string("'") + type_name(callee) + "' object is not callable");
}

static std::string object_desc(const Value& obj) {
  if (obj.is_none()) return "None";
  // jinja2 names the class with its module: transformers' namespace() class here.
  if (obj.is_namespace() && obj.as_dict().assignable) return "transformers.utils.chat_template_utils.TemplateNamespace object";
  return std::string(type_name(obj)) + " object";
}

Value Evaluator::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) raise_undefined(obj, "'" + name + "' of an undefined value");
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_tuple() && obj.items().size() == 2 && (name == "grouper" || name == "list")) {
    return obj.items()[name == "grouper" ? 0 : 1];  // groupby's (grouper, list) named tuple
  } else {
    if (auto m = find_method(*this, obj, name)) return *m;
    if (obj.is_dict())
      if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined("'" + object_desc(obj) + "' has no attribute '" + name + "'");
}

Value Evaluator::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) raise_undefined(obj, "indexing an undefined value");
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = length(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_sequence()) return obj.items()[static_cast<size_t>(i)];
      return Value::string(utf8_encode(utf8_decode(obj.as_string()).substr(static_cast<size_t>(i), 1)));
    }
    return Value::undefined(object_desc(obj) + " has no element " + repr(key));
  }
  if (key.is_string()) return getattr(obj, key.as_string());
  // jinja2 quotes the object only in its "has no attribute" message.
  return Value::undefined(object_desc(obj) + " has no element " + repr(key));
}

Value Evaluator::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.items[0], scope);
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    Value right = eval(*e.items[i + 1], scope);
    if (!binary_op(*this, e.compare_ops[i], left, right).truthy()) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  switch (e.kind) {
    case ExprKind::CONST: return e.constant;
    case ExprKind::NAME:
      if (folding_) throw NotConstant{};
      return lookup(e.name, scope);
    case ExprKind::LIST:
    case ExprKind::TUPLE: {
      ValueList items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, scope));
      return e.kind == ExprKind::LIST ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::DICT: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2)
        d.as_dict().set(eval(*e.items[i], scope), eval(*e.items[i + 1], scope));
      return d;
    }
    case ExprKind::GETATTR: return getattr(eval(*e.a, scope), e.name);
    case ExprKind::GETITEM: {
      Value obj = eval(*e.a, scope);
      if (e.b->kind == ExprKind::SLICE) {
        std::optional<Value> parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.b->items[static_cast<size_t>(i)]) parts[i] = eval(*e.b->items[static_cast<size_t>(i)], scope);
        if (folding_) return fold_slice(obj, parts[0] ? &*parts[0] : nullptr, parts[1] ? &*parts[1] : nullptr,
                                        parts[2] ? &*parts[2] : nullptr);
        if (obj.is_undefined()) raise_undefined(obj, "slicing an undefined value");
        return slice_value(obj, parts[0] ? &*parts[0] : nullptr, parts[1] ? &*parts[1] : nullptr,
                           parts[2] ? &*parts[2] : nullptr);
      }
      return getitem(obj, eval(*e.b, scope));
    }
    case ExprKind::SLICE: throw TemplateError("slice outside of a subscript");
    case ExprKind::CALL: {
      if (folding_) throw NotConstant{};
      Value callee = eval(*e.a, scope);
      CallArgs args = eval_args(e, scope);
      return call(callee, args);
    }
    case ExprKind::FILTER: {
      if (folding_ && not_foldable_filter(e)) throw NotConstant{};
      Value subject = e.a ? eval(*e.a, scope) : Value();
      CallArgs args = eval_args(e, scope);
      return apply_filter(e.name, subject, args);
    }
    case ExprKind::TEST: {
      Value subject = eval(*e.a, scope);
      CallArgs args = eval_args(e, scope);
      bool r = apply_test(e.name, subject, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::UNARY:
      if (e.unary_op == UnaryOp::NOT) return Value::boolean(!eval(*e.a, scope).truthy());
      return unary_op(e.unary_op, eval(*e.a, scope));
    case ExprKind::BINARY: {
      Value a = eval(*e.a, scope);
      Value b = eval(*e.b, scope);
      return binary_op(*this, e.binary_op, a, b);
    }
    case ExprKind::COMPARE: return eval_compare(e, scope);
    case ExprKind::AND: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? eval(*e.b, scope) : a;
    }
    case ExprKind::OR: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? a : eval(*e.b, scope);
    }
    case ExprKind::CONDITIONAL:
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      if (folding_ && !e.c) throw NotConstant{};  // jinja2 leaves the undefined to run time
      return e.c ? eval(*e.c, scope)
                 : Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                    " evaluated to false and no else section was defined.");
  }
  return Value();
}

}  // namespace spark::jinja
