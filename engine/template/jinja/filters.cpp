// filters.cpp — jinja2's built-in filters, with transformers' tojson, each matching the
// reference's output (including which filters return one-shot generators).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "engine/template/jinja/evaluator.h"
#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {

// ---- ArgReader ------------------------------------------------------------------------

const Value* ArgReader::find(size_t index, const char* name) const {
  for (const auto& [k, v] : call_.kwargs)
    if (k == name) return &v;
  if (index < call_.args.size()) return &call_.args[index];
  return nullptr;
}

Value ArgReader::get(size_t index, const char* name, Value fallback) const {
  const Value* v = find(index, name);
  return v ? *v : fallback;
}

Value ArgReader::require(size_t index, const char* name) const {
  const Value* v = find(index, name);
  if (!v) throw TemplateError(std::string(function_) + "() missing required argument '" + name + "'");
  return *v;
}

void ArgReader::expect_at_most(size_t count, std::initializer_list<const char*> names) const {
  if (call_.args.size() > count)
    throw TemplateError(std::string(function_) + "() takes at most " + std::to_string(count) + " argument(s)");
  for (const auto& [k, v] : call_.kwargs) {
    bool known = false;
    for (const char* n : names) known = known || k == n;
    if (!known) throw TemplateError(std::string(function_) + "() got an unexpected keyword argument '" + k + "'");
  }
}

namespace {

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py_lower(v.as_string())) : v; }

// environment.getitem along a dotted path ("a.b.0"), as jinja2's make_attrgetter.
Value get_path(Evaluator& ev, const Value& item, const Value& attribute) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  if (!attribute.is_string()) return ev.getitem(item, attribute);
  Value cur = item;
  static const std::string dot = ".";
  for (const std::string& part : py_split(attribute.as_string(), &dot, -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = ev.getitem(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
  }
  return cur;
}

int64_t int_arg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) return float_to_int(v.as_float());
  throw TemplateError(std::string(what) + " must be an integer, not " + type_name(v));
}

// ---- string filters ----

Value f_upper(Evaluator&, const Value& v, CallArgs&) { return Value::string(py_upper(to_str(v))); }
Value f_lower(Evaluator&, const Value& v, CallArgs&) { return Value::string(py_lower(to_str(v))); }
Value f_capitalize(Evaluator&, const Value& v, CallArgs&) { return Value::string(py_capitalize(to_str(v))); }

Value f_title(Evaluator&, const Value& v, CallArgs&) {
  // jinja2 splits before runs of `-`, whitespace and opening brackets, then capitalizes
  // the first character of each piece.
  std::u32string cps = utf8_decode(to_str(v));
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string piece = utf8_encode(std::u32string_view(cps).substr(i, j - i));
    if (sep) {
      out += piece;
    } else {
      std::string first = utf8_encode(std::u32string_view(cps).substr(i, 1));
      out += py_upper(first) + py_lower(utf8_encode(std::u32string_view(cps).substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::string(out);
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "trim");
  const Value* chars = r.find(0, "chars");
  std::string c = chars && !chars->is_none() ? to_str(*chars) : "";
  return Value::string(py_strip(to_str(v), chars && !chars->is_none() ? &c : nullptr, true, true));
}

Value f_replace(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "replace");
  Value count = r.get(2, "count", Value::none());
  std::string s = to_str(v), old_text = to_str(r.require(0, "old")), new_text = to_str(r.require(1, "new"));
  int64_t n = count.is_none() ? -1 : int_arg(count, "count");
  check_replace_size(ev, s, old_text, new_text, n);
  std::string out = py_replace(s, old_text, new_text, n);
  return Value::string(std::move(out));
}

Value f_string(Evaluator&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(to_str(v)); }
Value f_safe(Evaluator&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(to_str(v)); }

Value f_escape(Evaluator&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(out);
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "center");
  int64_t width = int_arg(r.get(0, "width", Value::integer(80)), "width");
  std::string s = to_str(v);
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  ev.check_size(static_cast<size_t>(width), "centered string");
  int64_t total = width - len;
  int64_t left = total / 2 + (total & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_indent(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "indent");
  Value width = r.get(0, "width", Value::integer(4));
  bool first = r.get(1, "first", Value::boolean(false)).truthy();
  bool blank = r.get(2, "blank", Value::boolean(false)).truthy();
  std::string indention = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(width, "width"), 0, 100000)), ' ');
  // jinja2 starts with `s += "\n"`: only a string survives that.
  if (v.is_undefined()) raise_undefined(v, "indent of an undefined value");
  if (!v.is_string())
    throw TemplateError(std::string("unsupported operand type(s) for +=: '") + type_name(v) + "' and 'str'");
  std::string s = v.as_string() + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
      ev.check_size(out.size(), "indented string");
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
      ev.check_size(out.size(), "indented string");
    }
  }
  if (first) out = indention + out;
  return Value::string(out);
}

Value f_truncate(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "truncate");
  int64_t len = int_arg(r.get(0, "length", Value::integer(255)), "length");
  bool killwords = r.get(1, "killwords", Value::boolean(false)).truthy();
  std::string end = to_str(r.get(2, "end", Value::string("...")));
  Value leeway_v = r.get(3, "leeway", Value::none());
  int64_t leeway = leeway_v.is_none() ? 5 : int_arg(leeway_v, "leeway");
  int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (len < end_len) throw TemplateError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(len));
  if (leeway < 0) throw TemplateError("expected leeway >= 0, got " + std::to_string(leeway));
  // jinja2 returns anything with a short enough len() unchanged, and slices only strings.
  if (!v.is_string()) {
    if (length(v) <= len + leeway) return v;
    throw TemplateError(std::string("cannot truncate a '") + type_name(v) + "'");
  }
  std::u32string cps = utf8_decode(v.as_string());
  if (static_cast<int64_t>(cps.size()) <= len + leeway) return Value::string(utf8_encode(cps));
  std::string head = utf8_encode(cps.substr(0, static_cast<size_t>(len - end_len)));
  if (killwords) return Value::string(head + end);
  size_t space = head.rfind(' ');
  if (space != std::string::npos) head = head.substr(0, space);
  return Value::string(head + end);
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t cp : utf8_decode(to_str(v))) {
    bool w = py_isalnum(cp) || cp == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_format(Evaluator&, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    throw TemplateError("can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    Value d = Value::dict();
    for (const auto& [k, val] : a.kwargs) d.as_dict().set(k, val);
    return Value::string(percent_format(to_str(v), d));
  }
  return Value::string(percent_format(to_str(v), Value::tuple(a.args)));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), no HTML escaping.
Value f_tojson(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "tojson");
  JsonOptions o;
  o.ensure_ascii = r.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  Value indent = r.get(1, "indent", Value::none());
  if (indent.is_string()) o.indent = indent.as_string();
  else if (indent.is_int() || indent.is_bool()) o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1000)), ' ');
  else if (!indent.is_none()) throw TemplateError("tojson indent must be an integer or a string");
  Value seps = r.get(2, "separators", Value::none());
  if (seps.is_sequence()) {
    if (seps.items().size() != 2) throw TemplateError("tojson separators must be a pair of strings");
    o.item_separator = to_str(seps.items()[0]);
    o.key_separator = to_str(seps.items()[1]);
  }
  o.sort_keys = r.get(3, "sort_keys", Value::boolean(false)).truthy();
  return Value::string(json_dumps(v, o));
}

// ---- numbers ----

std::optional<int64_t> parse_int(std::string s, int base) {
  s = py_strip(s, nullptr, true, true);
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  if (clean.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (clean[0] == '+' || clean[0] == '-') {
    neg = clean[0] == '-';
    i = 1;
  }
  if ((base == 16 || base == 8 || base == 2) && clean.size() > i + 1 && clean[i] == '0') {
    char p = static_cast<char>(std::tolower(static_cast<unsigned char>(clean[i + 1])));
    if ((base == 16 && p == 'x') || (base == 8 && p == 'o') || (base == 2 && p == 'b')) i += 2;
  }
  if (i >= clean.size()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long val = std::strtoll(clean.c_str() + i, &end, base);
  if (errno || *end != '\0' || clean[i] == '-' || clean[i] == '+' || py_isspace(static_cast<unsigned char>(clean[i]))) return std::nullopt;
  return neg ? -val : val;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string lower = py_lower(s);
  std::string body = lower;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1 : 1;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  if (s.empty() || s.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return d;
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "int");
  Value fallback = r.get(0, "default", Value::integer(0));
  int base = static_cast<int>(int_arg(r.get(1, "base", Value::integer(10)), "base"));
  // int(Undefined) raises UndefinedError, which jinja2 does not turn into the default.
  if (v.is_undefined()) raise_undefined(v, "int of an undefined value");
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    if (auto f = parse_float(v.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
      return Value::integer(static_cast<int64_t>(*f));
  }
  return fallback;
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "float");
  Value fallback = r.get(0, "default", Value::floating(0.0));
  if (v.is_undefined()) raise_undefined(v, "float of an undefined value");
  if (v.is_number()) return Value::floating(v.as_float());
  if (v.is_string())
    if (auto f = parse_float(v.as_string())) return Value::floating(*f);
  return fallback;
}

Value f_abs(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  throw TemplateError(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

double round_half_even(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  if (digits < -308) return 0.0 * x;
  if (digits >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);  // correctly rounded, ties to even
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-digits));
  double y = x / p;
  double r = std::nearbyint(y);  // default rounding mode: to nearest, ties to even
  return r * p;
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "round");
  int64_t precision = int_arg(r.get(0, "precision", Value::integer(0)), "precision");
  std::string method = to_str(r.get(1, "method", Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("method must be common, ceil or floor");
  if (!v.is_number()) throw TemplateError(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value::integer(v.as_int());
      return Value::integer(float_to_int(round_half_even(static_cast<double>(v.as_int()), precision)));
    }
    return Value::floating(round_half_even(v.as_float(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  x = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::floating(x / scale);
}

// ---- sequences ----

Value f_length(Evaluator&, const Value& v, CallArgs&) { return Value::integer(length(v)); }
Value f_list(Evaluator&, const Value& v, CallArgs&) { return Value::list(iterate(v)); }

Value f_first(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_iterator()) {
    IterState& it = v.iter();
    if (it.pos < it.ready().size()) return it.items[it.pos++];
    return Value::undefined("No first item, sequence was empty.");
  }
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_iterator()) throw TemplateError(std::string("'") + type_name(v) + "' object is not reversible");
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "join");
  std::string sep = to_str(r.get(0, "d", Value::string("")));
  Value attribute = r.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : get_path(ev, item, attribute));
    ev.check_size(out.size(), "joined string");
  }
  return Value::string(std::move(out));
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "default");
  Value fallback = r.get(0, "default_value", Value::string(""));
  bool boolean = r.get(1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_items_now(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::iterator({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::tuple({k, val}));
  return Value::iterator(std::move(out));
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "dictsort");
  bool case_sensitive = r.get(0, "case_sensitive", Value::boolean(false)).truthy();
  std::string by = to_str(r.get(1, "by", Value::string("key")));
  bool reverse = r.get(2, "reverse", Value::boolean(false)).truthy();
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) raise_undefined(v, "dictsort of an undefined value");  // its .items()
  if (!v.is_dict()) throw TemplateError(std::string("dictsort expects a mapping, got ") + type_name(v));
  size_t pos = by == "key" ? 0 : 1;
  ValueList out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::tuple({k, val}));
  auto key = [&](const Value& t) { return case_sensitive ? t.items()[pos] : ignore_case(t.items()[pos]); };
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(out));
}

// Keys for sort/unique/min/max: a list of attribute paths (comma separated), lower-cased
// unless case_sensitive.
Value sort_key(Evaluator& ev, const Value& item, const Value& attribute, bool case_sensitive, bool multi) {
  auto post = [&](const Value& x) { return case_sensitive ? x : ignore_case(x); };
  if (attribute.is_none()) return post(item);
  if (multi && attribute.is_string()) {
    ValueList parts;
    static const std::string comma = ",";
    for (const std::string& p : py_split(attribute.as_string(), &comma, -1))
      parts.push_back(post(get_path(ev, item, Value::string(p))));
    return Value::list(std::move(parts));
  }
  return post(get_path(ev, item, attribute));
}

Value f_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "sort");
  bool reverse = r.get(0, "reverse", Value::boolean(false)).truthy();
  bool case_sensitive = r.get(1, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = r.get(2, "attribute", Value::none());
  ValueList items = iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i)
    keyed.emplace_back(sort_key(ev, items[i], attribute, case_sensitive, true), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
  });
  ValueList out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_unique_now(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "unique");
  bool case_sensitive = r.get(0, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = r.get(1, "attribute", Value::none());
  ValueList out;
  std::unordered_map<std::string, bool> seen;
  for (const Value& item : iterate(v))
    if (seen.emplace(hash_key(sort_key(ev, item, attribute, case_sensitive, false)), true).second) out.push_back(item);
  return Value::iterator(std::move(out));
}

Value min_max(Evaluator& ev, const Value& v, CallArgs& a, bool want_max) {
  ArgReader r(a, want_max ? "max" : "min");
  bool case_sensitive = r.get(0, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = r.get(1, "attribute", Value::none());
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(ev, items[0], attribute, case_sensitive, false);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(ev, items[i], attribute, case_sensitive, false);
    if (want_max ? less_than(best_key, k) : less_than(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_min(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, false); }
Value f_max(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, true); }

Value f_sum(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "sum");
  Value attribute = r.get(0, "attribute", Value::none());
  Value total = r.get(1, "start", Value::integer(0));
  for (const Value& item : iterate(v)) {
    Value x = attribute.is_none() ? item : get_path(ev, item, attribute);
    if (total.is_string()) throw TemplateError("sum() can't sum strings [use ''.join(seq) instead]");
    total = binary_op(ev, BinaryOp::ADD, total, x);
  }
  return total;
}

Value f_reverse(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps));
  }
  // reversed(Undefined) works through its __len__ and __getitem__: an empty `reversed`.
  if (v.is_undefined()) return Value::iterator({}, "reversed");
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_iterator()) return Value::list(std::move(items));
  const char* type = "list_reverseiterator";
  if (v.is_dict() || v.view() == DictView::KEYS) type = "dict_reversekeyiterator";
  else if (v.view() == DictView::VALUES) type = "dict_reversevalueiterator";
  else if (v.view() == DictView::ITEMS) type = "dict_reverseitemiterator";
  else if (v.is_tuple()) type = "reversed";
  return Value::iterator(std::move(items), type);
}

Value f_batch_now(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "batch");
  int64_t count = int_arg(r.require(0, "linecount"), "linecount");
  if (count <= 0) throw TemplateError("batch size must be positive");
  Value fill = r.get(1, "fill_with", Value::none());
  ValueList out, cur;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == count) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::iterator(std::move(out));
}

Value f_slice_now(Evaluator&, const Value& v, CallArgs& a) {
  ArgReader r(a, "slice");
  int64_t slices = int_arg(r.require(0, "slices"), "slices");
  if (slices <= 0 || slices > 1000000) throw TemplateError("slice count must be between 1 and 1000000");
  Value fill = r.get(1, "fill_with", Value::none());
  ValueList seq = iterate(v);
  int64_t n = static_cast<int64_t>(seq.size());
  int64_t per = n / slices, extra = n % slices, offset = 0;
  ValueList out;
  for (int64_t s = 0; s < slices; ++s) {
    int64_t start = offset + s * per;
    if (s < extra) ++offset;
    int64_t end = offset + (s + 1) * per;
    ValueList part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && s >= extra) part.push_back(fill);
    out.push_back(Value::list(std::move(part)));
  }
  return Value::iterator(std::move(out));
}

Value f_attr(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "attr");
  const std::string name = to_str(r.require(0, "name"));
  // Unlike `.name`, jinja2's attr filter never falls back to a dict's items.
  if (v.is_dict()) {
    if (auto method = find_method(ev, v, name)) return *method;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  return ev.getattr(v, name);
}

Value f_map_now(Evaluator& ev, const Value& v, CallArgs& a) {
  ValueList out;
  if (!v.truthy()) return Value::iterator({});
  ValueList items = iterate(v);
  if (a.args.empty()) {
    ArgReader r(a, "map");
    const Value* attribute = r.find(99, "attribute");
    if (!attribute) throw TemplateError("map requires a filter name or attribute=");
    Value fallback = r.get(99, "default", Value::none());
    for (const Value& item : items) {
      Value x = get_path(ev, item, *attribute);
      if (!fallback.is_none() && x.is_undefined()) x = fallback;
      out.push_back(x);
    }
    return Value::iterator(std::move(out));
  }
  std::string name = to_str(a.args[0]);
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : items) {
    CallArgs copy = rest;
    out.push_back(ev.apply_filter(name, item, copy));
  }
  return Value::iterator(std::move(out));
}

Value select_or_reject(Evaluator& ev, const Value& v, CallArgs& a, bool keep_when, bool lookup_attr) {
  if (!v.truthy()) return Value::iterator({});
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (a.args.empty()) throw TemplateError("Missing parameter for attribute name");
    attribute = a.args[0];
    off = 1;
  }
  bool has_test = a.args.size() > off;
  std::string test = has_test ? to_str(a.args[off]) : "";
  CallArgs rest;
  if (has_test) rest.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(off) + 1, a.args.end());
  rest.kwargs = a.kwargs;
  ValueList out;
  for (const Value& item : iterate(v)) {
    ev.charge_step();
    Value x = lookup_attr ? get_path(ev, item, attribute) : item;
    bool r;
    if (has_test) {
      CallArgs copy = rest;
      r = ev.apply_test(test, x, copy);
    } else {
      r = x.truthy();
    }
    if (r == keep_when) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}
Value f_select_now(Evaluator& ev, const Value& v, CallArgs& a) { return select_or_reject(ev, v, a, true, false); }
Value f_reject_now(Evaluator& ev, const Value& v, CallArgs& a) { return select_or_reject(ev, v, a, false, false); }
Value f_selectattr_now(Evaluator& ev, const Value& v, CallArgs& a) { return select_or_reject(ev, v, a, true, true); }
Value f_rejectattr_now(Evaluator& ev, const Value& v, CallArgs& a) { return select_or_reject(ev, v, a, false, true); }

Value f_groupby(Evaluator& ev, const Value& v, CallArgs& a) {
  ArgReader r(a, "groupby");
  Value attribute = r.require(0, "attribute");
  Value fallback = r.get(1, "default", Value::none());
  bool case_sensitive = r.get(2, "case_sensitive", Value::boolean(false)).truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) {
    Value k = get_path(ev, item, attribute);
    if (!fallback.is_none() && k.is_undefined()) k = fallback;
    keyed.emplace_back(case_sensitive ? k : ignore_case(k), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return less_than(x.first, y.first); });
  ValueList out;
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i;
    ValueList group;
    while (j < keyed.size() && equals(keyed[j].first, keyed[i].first)) group.push_back(keyed[j++].second);
    Value key = case_sensitive ? keyed[i].first : get_path(ev, group[0], attribute);
    out.push_back(Value::tuple({key, Value::list(std::move(group))}));
    i = j;
  }
  return Value::list(std::move(out));
}

// jinja2 writes these filters as Python generators (see IterState::body): the body above
// runs when the result is first consumed. The names are the Python functions repr() shows.
Value deferred(const char* function, FilterFn now, Evaluator& ev, const Value& v, CallArgs& a) {
  int nesting = v.nesting();
  for (const Value& x : a.args) nesting = std::max(nesting, x.nesting());
  for (const auto& kv : a.kwargs) nesting = std::max(nesting, kv.second.nesting());
  return Value::generator(function, [now, &ev, v, a]() mutable { return iterate(now(ev, v, a)); }, nesting);
}
Value f_items(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("do_items", f_items_now, ev, v, a); }
Value f_unique(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("sync_do_unique", f_unique_now, ev, v, a); }
Value f_batch(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("do_batch", f_batch_now, ev, v, a); }
Value f_slice(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("sync_do_slice", f_slice_now, ev, v, a); }
Value f_map(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("sync_do_map", f_map_now, ev, v, a); }
Value f_select(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("select_or_reject", f_select_now, ev, v, a); }
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) { return deferred("select_or_reject", f_reject_now, ev, v, a); }
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return deferred("select_or_reject", f_selectattr_now, ev, v, a);
}
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return deferred("select_or_reject", f_rejectattr_now, ev, v, a);
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"upper", f_upper}, {"lower", f_lower}, {"capitalize", f_capitalize}, {"title", f_title},
      {"trim", f_trim}, {"replace", f_replace}, {"string", f_string}, {"safe", f_safe},
      {"escape", f_escape}, {"e", f_escape}, {"forceescape", f_escape}, {"center", f_center},
      {"indent", f_indent}, {"truncate", f_truncate}, {"wordcount", f_wordcount}, {"format", f_format},
      {"tojson", f_tojson}, {"int", f_int}, {"float", f_float}, {"abs", f_abs}, {"round", f_round},
      {"length", f_length}, {"count", f_length}, {"list", f_list}, {"first", f_first}, {"last", f_last},
      {"join", f_join}, {"default", f_default}, {"d", f_default}, {"items", f_items},
      {"dictsort", f_dictsort}, {"sort", f_sort}, {"unique", f_unique}, {"min", f_min}, {"max", f_max},
      {"sum", f_sum}, {"reverse", f_reverse}, {"batch", f_batch}, {"slice", f_slice}, {"attr", f_attr},
      {"map", f_map}, {"select", f_select}, {"reject", f_reject}, {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"groupby", f_groupby},
  };
  return table;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  const auto& table = filter_table();
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace spark::jinja
