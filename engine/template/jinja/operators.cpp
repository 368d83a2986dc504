// operators.cpp — arithmetic, concatenation, comparison, membership and slicing with
// Python's semantics (int/float promotion, floor division, modulo sign, str/list repetition).
#include <algorithm>
#include <cmath>

#include "engine/template/jinja/evaluator.h"
#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {
namespace {

[[noreturn]] void fail_undefined(const Value& v) { raise_undefined(v, "an undefined value was used in an expression"); }

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  throw TemplateError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

[[noreturn]] void overflow() {
  throw TemplateError("integer overflow: the result does not fit in 64 bits");
}

// The builtins write the wrapped result and report overflow, which Python never has.
int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(Evaluator& ev, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(times) > ev.limits().max_string_bytes / s.size() + 1)
      ev.check_size(static_cast<size_t>(-1), "repeated string");
    ev.check_size(s.size() * static_cast<size_t>(times), "repeated string");
    if (s.size() == 1) return Value::string(std::string(static_cast<size_t>(times), s[0]));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const ValueList& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(times) > ev.limits().max_string_bytes / (items.size() * 16) + 1)
    ev.check_size(static_cast<size_t>(-1), "repeated list");
  ev.check_size(items.size() * static_cast<size_t>(times) * 16, "repeated list");
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double py_fmod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  else if (r == 0) r = std::copysign(0.0, b);
  return r;
}

Value power(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float() && b.as_int() >= 0) {
    int64_t base = a.as_int(), exp = b.as_int(), result = 1;
    while (exp > 0) {
      if (exp & 1) result = checked_mul(result, base);
      exp >>= 1;
      if (exp > 0) base = checked_mul(base, base);
    }
    return Value::integer(result);
  }
  double x = a.as_float(), y = b.as_float();
  if (x == 0 && y < 0) throw TemplateError("0.0 cannot be raised to a negative power");
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw TemplateError("numerical result out of range");
  return Value::floating(r);
}

}  // namespace

Value binary_op(Evaluator& ev, BinaryOp op, const Value& a, const Value& b) {
  switch (op) {
    case BinaryOp::EQ: return Value::boolean(equals(a, b));
    case BinaryOp::NE: return Value::boolean(!equals(a, b));
    case BinaryOp::LT: return Value::boolean(less_than(a, b));
    case BinaryOp::GT: return Value::boolean(less_than(b, a));
    case BinaryOp::LE: return Value::boolean(less_than(a, b) || equals(a, b));
    case BinaryOp::GE: return Value::boolean(less_than(b, a) || equals(a, b));
    case BinaryOp::IN: return Value::boolean(contains(b, a));
    case BinaryOp::NOT_IN: return Value::boolean(!contains(b, a));
    case BinaryOp::CONCAT: {
      std::string l = to_str(a), r = to_str(b);
      ev.check_size(l.size() + r.size(), "concatenated string");
      return Value::string(l + r);
    }
    default: break;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  switch (op) {
    case BinaryOp::ADD:
      if (numbers) {
        if (floats) return Value::floating(a.as_float() + b.as_float());
        return Value::integer(checked_add(a.as_int(), b.as_int()));
      }
      if (a.is_string() && b.is_string()) {
        ev.check_size(a.as_string().size() + b.as_string().size(), "concatenated string");
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.kind() == b.kind() && a.is_sequence() && b.is_sequence()) {
        ev.check_size((a.items().size() + b.items().size()) * 16, "concatenated list");
        ValueList items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() || a.is_sequence())
        throw TemplateError(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) +
                            "\") to " + type_name(a));
      unsupported("+", a, b);
    case BinaryOp::SUB:
      if (!numbers) unsupported("-", a, b);
      if (floats) return Value::floating(a.as_float() - b.as_float());
      return Value::integer(checked_sub(a.as_int(), b.as_int()));
    case BinaryOp::MUL:
      if (numbers) {
        if (floats) return Value::floating(a.as_float() * b.as_float());
        return Value::integer(checked_mul(a.as_int(), b.as_int()));
      }
      if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(ev, a, b.as_int());
      if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(ev, b, a.as_int());
      if (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence())
        throw TemplateError(std::string("can't multiply sequence by non-int of type '") +
                            type_name(a.is_string() || a.is_sequence() ? b : a) + "'");
      unsupported("*", a, b);
    case BinaryOp::DIV:
      if (!numbers) unsupported("/", a, b);
      if (b.as_float() == 0) throw TemplateError("division by zero");
      return Value::floating(a.as_float() / b.as_float());
    case BinaryOp::FLOORDIV:
      if (!numbers) unsupported("//", a, b);
      if (floats) {
        if (b.as_float() == 0) throw TemplateError("float floor division by zero");
        double x = a.as_float(), y = b.as_float();
        return Value::floating((x - py_fmod(x, y)) / y);
      }
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      return Value::integer(floor_div(a.as_int(), b.as_int()));
    case BinaryOp::MOD:
      if (a.is_string()) return Value::string(percent_format(a.as_string(), b));
      if (!numbers) unsupported("%", a, b);
      if (floats) {
        if (b.as_float() == 0) throw TemplateError("float modulo");
        return Value::floating(py_fmod(a.as_float(), b.as_float()));
      }
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      return Value::integer(py_mod(a.as_int(), b.as_int()));
    case BinaryOp::POW:
      if (!numbers) unsupported("** or pow()", a, b);
      return power(a, b);
    default: break;
  }
  throw TemplateError("unknown operator");
}

void check_replace_size(Evaluator& ev, const std::string& s, const std::string& old_text,
                        const std::string& new_text, int64_t count) {
  uint64_t hits = static_cast<uint64_t>(py_count(s, old_text));
  if (count >= 0) hits = std::min<uint64_t>(hits, static_cast<uint64_t>(count));
  if (new_text.size() > old_text.size() && hits > 0) {
    uint64_t grow = new_text.size() - old_text.size();
    if (hits > ev.limits().max_string_bytes / grow + 1) ev.check_size(static_cast<size_t>(-1), "replaced string");
    ev.check_size(s.size() + static_cast<size_t>(hits * grow), "replaced string");
  }
}

Value unary_op(UnaryOp op, const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (!a.is_number())
    throw TemplateError(std::string("bad operand type for unary ") + (op == UnaryOp::NEG ? "-" : "+") + ": '" +
                        type_name(a) + "'");
  if (op == UnaryOp::POS) return a.is_bool() ? Value::integer(a.as_int()) : a;
  if (a.is_float()) return Value::floating(-a.as_float());
  if (a.as_int() == INT64_MIN) overflow();
  return Value::integer(-a.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::STRING:
      if (!item.is_string())
        throw TemplateError(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::LIST:
    case Kind::TUPLE:
      for (const Value& v : container.items())
        if (equals(v, item)) return true;
      return false;
    case Kind::DICT:
      // Python's `in` hashes the key: lists and dicts (and tuples of them) raise.
      // (A values view hashes by identity: never a key here.)
      if ((item.kind() == Kind::LIST && item.view() != DictView::VALUES) || item.is_dict() || item.is_tuple())
        hash_key(item);
      if (item.is_undefined() || item.is_callable() || item.is_iterator() || item.is_namespace()) return false;
      return container.as_dict().find(item) != nullptr;
    case Kind::UNDEFINED: return false;
    case Kind::ITERATOR: {
      IterState& it = container.iter();
      const ValueList& items = it.ready();
      while (it.pos < items.size())
        if (equals(items[it.pos++], item)) return true;
      return false;
    }
    default:
      throw TemplateError(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

Value slice_value(const Value& v, const Value* start, const Value* stop, const Value* step) {
  auto as_index = [](const Value* x) -> std::optional<int64_t> {
    if (!x || x->is_none()) return std::nullopt;
    if (!(x->is_int() || x->is_bool()))
      throw TemplateError("slice indices must be integers or None or have an __index__ method");
    return x->as_int();
  };
  if (v.is_dict()) throw TemplateError("unhashable type: 'slice'");  // a dict looks the slice up as a key
  if (!v.is_string() && !v.is_sequence())
    throw TemplateError(std::string("'") + type_name(v) + "' object is not subscriptable");
  std::u32string cps;
  int64_t n;
  if (v.is_string()) {
    cps = utf8_decode(v.as_string());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(v.items().size());
  }
  int64_t st = as_index(step).value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> x, int64_t fallback) {
    if (!x) return fallback;
    int64_t i = *x;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t b = adjust(as_index(start), st > 0 ? 0 : n - 1);
  int64_t e = adjust(as_index(stop), st > 0 ? n : -1);
  std::vector<int64_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);
  if (v.is_string()) {
    std::u32string out;
    for (int64_t i : picks) out.push_back(cps[static_cast<size_t>(i)]);
    return Value::string(utf8_encode(out));
  }
  ValueList out;
  for (int64_t i : picks) out.push_back(v.items()[static_cast<size_t>(i)]);
  return v.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace spark::jinja
