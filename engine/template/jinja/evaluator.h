// evaluator.h — renders a parsed template: scopes, statements, expressions, calls, and the
// budgets (depth, steps, output size) that stop hostile templates.
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/template/jinja/ast.h"
#include "engine/template/jinja/error.h"
#include "engine/template/jinja/value.h"

namespace spark::jinja {

// Variables visible at one level. Lookups walk to the parent. Macros keep the scope they
// were defined in alive, as Python closures do.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const;
  // A new scope inside `parent` in which `fresh` are undefined (jinja2's scope-local names).
  static std::shared_ptr<Scope> inside(const std::shared_ptr<Scope>& parent, const std::vector<std::string>& fresh);
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  explicit Evaluator(const Limits& limits) : limits_(limits) {}

  // Renders `body` with `globals` (a dict of variables) visible, except `fresh`: names the
  // template assigns at its top level before reading them, undefined until then.
  std::string render(const Body& body, const Value& globals, const std::vector<std::string>& fresh = {});

  Value eval(const Expr& e, const ScopePtr& scope);
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);  // obj.name
  Value getitem(const Value& obj, const Value& key);         // obj[key]

  // The value of an expression built only from literals, as jinja2 folds it while compiling
  // (folding.cpp); nullopt when it names a variable, calls, or fails.
  std::optional<Value> try_fold(const Expr& e);

  // Budgets: every loop iteration, call and output charges a step; strings and lists
  // built while rendering are size-checked before they are allocated.
  void charge_step();
  void check_size(size_t bytes, const char* what) const;
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { NORMAL, BREAK, CONTINUE };
  struct NotConstant {};  // thrown while folding at what only run time can evaluate
  bool not_foldable_filter(const Expr& e) const;
  Value fold_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out, const Value& iterable, int depth);
  void exec_set(const Stmt& s, const ScopePtr& scope, Value value);
  void assign(const Expr& target, const ScopePtr& scope, const Value& value);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const std::string& name);
  Value apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope);
  void append(std::string& out, const std::string& text);
  // A filter block whose filter returned a non-string counts here until the buffer it wrote
  // into is complete; check_joinable(count at the buffer's start) then raises, as jinja2's
  // "".join does.
  void check_joinable(size_t before);
  // The text of a set or filter block's body, rendered in its own inner frame (as jinja2's:
  // names set and macros defined inside stay inside) and joined.
  std::string render_inner(const Stmt& s, const ScopePtr& scope);

  const Limits& limits_;
  int depth_ = 0;
  int macro_depth_ = 0;
  size_t steps_ = 0;
  size_t output_bytes_ = 0;
  size_t unjoinable_ = 0;
  bool folding_ = false;
  std::string unjoinable_type_;
  ScopePtr root_;

  friend struct DepthGuard;
};

// Binary and unary operators with Python semantics (operators.cpp).
Value binary_op(Evaluator& ev, BinaryOp op, const Value& a, const Value& b);
Value unary_op(UnaryOp op, const Value& a);
bool contains(const Value& container, const Value& item);  // `item in container`
// Python slicing of a str, list or tuple; null parts are absent.
Value slice_value(const Value& v, const Value* start, const Value* stop, const Value* step);

// Built-in filters, tests, methods and globals (filters.cpp, builtin_tests.cpp,
// methods.cpp, globals.cpp).
using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);
using TestFn = bool (*)(Evaluator&, const Value&, CallArgs&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// A bound method of a str, list or dict (`"a".upper`), or an unsafe marker for methods the
// immutable sandbox forbids; nullopt when the type has no such method.
std::optional<Value> find_method(Evaluator& ev, const Value& obj, const std::string& name);
void add_globals(Dict& globals);

// Folds the constant expressions of a parsed template as jinja2's compiler does (folding.cpp).
void fold_constants(Body& body, const Limits& limits);

// Refuses a str.replace whose result would pass the string size limit, before building it.
void check_replace_size(Evaluator& ev, const std::string& s, const std::string& old_text,
                        const std::string& new_text, int64_t count);

// Reads filter/function arguments by position or keyword, as a Python signature would.
class ArgReader {
 public:
  ArgReader(CallArgs& call, const char* function) : call_(call), function_(function) {}
  const Value* find(size_t index, const char* name) const;
  Value get(size_t index, const char* name, Value fallback) const;
  Value require(size_t index, const char* name) const;
  // Throws when more than `count` positional arguments were given or a keyword is unknown.
  void expect_at_most(size_t count, std::initializer_list<const char*> names) const;

 private:
  CallArgs& call_;
  const char* function_;
};

}  // namespace spark::jinja
