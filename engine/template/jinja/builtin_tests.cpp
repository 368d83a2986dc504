// builtin_tests.cpp — jinja2's tests (`x is defined`, `n is divisibleby 3`, ...), with the
// Python type checks behind them (a bool is a number but not an integer).
#include <unordered_map>

#include "engine/template/jinja/evaluator.h"
#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {
namespace {

const Value& arg0(CallArgs& a, const char* test) {
  if (a.args.empty()) {
    if (!a.kwargs.empty()) return a.kwargs[0].second;
    throw TemplateError(std::string("test '") + test + "' needs an argument");
  }
  return a.args[0];
}

bool t_defined(Evaluator&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Evaluator&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Evaluator&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Evaluator&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Evaluator&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Evaluator&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Evaluator&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Evaluator&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Evaluator&, const Value& v, CallArgs&) { return v.is_dict(); }
// jinja2 asks for len() and __getitem__, which Undefined has.
bool t_sequence(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_iterable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.view() != DictView::NONE || v.is_dict() || v.is_iterator() ||
         v.is_undefined();
}
bool t_callable(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_namespace()) return v.as_dict().find(std::string("__call__")) != nullptr;
  return v.is_callable() || v.is_undefined();
}
// jinja2 computes `value % n == k` with Python's % (floats too; str % is formatting).
bool remainder_is(Evaluator& ev, const Value& v, const Value& n, int64_t k) {
  return equals(binary_op(ev, BinaryOp::MOD, v, n), Value::integer(k));
}
bool t_odd(Evaluator& ev, const Value& v, CallArgs&) { return remainder_is(ev, v, Value::integer(2), 1); }
bool t_even(Evaluator& ev, const Value& v, CallArgs&) { return remainder_is(ev, v, Value::integer(2), 0); }
bool t_divisibleby(Evaluator& ev, const Value& v, CallArgs& a) {
  return remainder_is(ev, v, arg0(a, "divisibleby"), 0);
}
bool t_lower(Evaluator&, const Value& v, CallArgs&) {
  bool cased = false;
  for (char32_t cp : utf8_decode(to_str(v))) {
    if (py_isupper(cp)) return false;
    cased = cased || py_islower(cp);
  }
  return cased;
}
bool t_upper(Evaluator&, const Value& v, CallArgs&) {
  bool cased = false;
  for (char32_t cp : utf8_decode(to_str(v))) {
    if (py_islower(cp)) return false;
    cased = cased || py_isupper(cp);
  }
  return cased;
}
bool t_in(Evaluator&, const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool t_eq(Evaluator&, const Value& v, CallArgs& a) { return equals(v, arg0(a, "eq")); }
bool t_ne(Evaluator&, const Value& v, CallArgs& a) { return !equals(v, arg0(a, "ne")); }
bool t_lt(Evaluator&, const Value& v, CallArgs& a) { return less_than(v, arg0(a, "lt")); }
bool t_gt(Evaluator&, const Value& v, CallArgs& a) { return less_than(arg0(a, "gt"), v); }
bool t_le(Evaluator&, const Value& v, CallArgs& a) { return less_than(v, arg0(a, "le")) || equals(v, arg0(a, "le")); }
bool t_ge(Evaluator&, const Value& v, CallArgs& a) { return less_than(arg0(a, "ge"), v) || equals(v, arg0(a, "ge")); }
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::NONE: return true;
    case Kind::BOOL: case Kind::INT: case Kind::FLOAT: case Kind::STRING: return equals(v, o);
    case Kind::LIST: case Kind::TUPLE: return &v.items() == &o.items();
    case Kind::DICT: case Kind::NAMESPACE: return v.dict_ptr() == o.dict_ptr();
    default: return equals(v, o);
  }
}
bool t_escaped(Evaluator&, const Value&, CallArgs&) { return false; }
bool t_filter(Evaluator&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()); }
bool t_test(Evaluator&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()); }

const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float},
      {"number", t_number}, {"string", t_string}, {"mapping", t_mapping}, {"sequence", t_sequence},
      {"iterable", t_iterable}, {"callable", t_callable}, {"odd", t_odd}, {"even", t_even},
      {"divisibleby", t_divisibleby}, {"lower", t_lower}, {"upper", t_upper}, {"in", t_in},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt},
      {"le", t_le}, {"<=", t_le}, {"ge", t_ge}, {">=", t_ge}, {"sameas", t_sameas},
      {"escaped", t_escaped}, {"filter", t_filter}, {"test", t_test},
  };
  return table;
}

}  // namespace

TestFn find_test(const std::string& name) {
  const auto& table = test_table();
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace spark::jinja
