// methods.cpp — the Python methods templates call on values (str.strip, dict.items, ...),
// and the sandbox's refusal of methods that would mutate (list.append, dict.update, ...).
#include <algorithm>

#include "engine/template/jinja/evaluator.h"
#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {
namespace {

using Method = Value (*)(Evaluator&, const Value&, CallArgs&);

std::string str_arg(const ArgReader& r, size_t i, const char* name, const char* method) {
  Value v = r.require(i, name);
  if (!v.is_string())
    throw TemplateError(std::string(method) + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

// Optional `chars` / `sep` argument: nullptr when absent or None.
std::optional<std::string> opt_str(const ArgReader& r, size_t i, const char* name) {
  const Value* v = r.find(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError(std::string(name) + " must be None or a string, not " + type_name(*v));
  return v->as_string();
}

Value list_of_strings(std::vector<std::string> parts) {
  ValueList out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

bool affix_match(const Value& self, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      throw TemplateError(std::string(prefix ? "startswith" : "endswith") +
                          " first arg must be str or a tuple of str, not " + type_name(a));
    const std::string &s = self.as_string(), &x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

template <bool (*Pred)(char32_t)>
Value all_chars(const Value& self) {
  std::u32string cps = utf8_decode(self.as_string());
  if (cps.empty()) return Value::boolean(false);
  return Value::boolean(std::all_of(cps.begin(), cps.end(), Pred));
}

Value case_check(const Value& self, bool upper) {
  bool any_cased = false;
  for (char32_t cp : utf8_decode(self.as_string())) {
    if (upper ? py_islower(cp) : py_isupper(cp)) return Value::boolean(false);
    if (py_iscased(cp)) any_cased = true;
  }
  return Value::boolean(any_cased);
}

Value justify(Evaluator& ev, const Value& self, CallArgs& a, char how) {
  ArgReader r(a, "justify");
  int64_t width = r.require(0, "width").as_int();
  std::string fill = r.get(1, "fillchar", Value::string(" ")).as_string();
  int64_t len = length(self);
  if (width <= len) return self;
  if (utf8_length(fill) != 1) throw TemplateError("The fill character must be exactly one character long");
  ev.check_size(static_cast<size_t>(width), "padded string");
  ev.check_size(static_cast<size_t>(width) * fill.size(), "padded string");
  int64_t total = width - len;
  int64_t left = how == 'l' ? 0 : how == 'r' ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += self.as_string();
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value::string(out);
}

Value str_method(Evaluator& ev, const Value& self, const std::string& name, CallArgs& a) {
  ArgReader r(a, name.c_str());
  const std::string& s = self.as_string();
  if (name == "startswith" || name == "endswith")
    return Value::boolean(affix_match(self, r.require(0, "prefix"), name == "startswith"));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = opt_str(r, 0, "chars");
    return Value::string(py_strip(s, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str(r, 0, "sep");
    if (sep && sep->empty()) throw TemplateError("empty separator");
    int64_t maxsplit = r.get(1, "maxsplit", Value::integer(-1)).as_int();
    return list_of_strings(name == "split" ? py_split(s, sep ? &*sep : nullptr, maxsplit)
                                           : py_rsplit(s, sep ? &*sep : nullptr, maxsplit));
  }
  if (name == "splitlines") return list_of_strings(py_splitlines(s, r.get(0, "keepends", Value::boolean(false)).truthy()));
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "swapcase") return Value::string(py_swapcase(s));
  if (name == "replace") {
    std::string old_text = str_arg(r, 0, "old", "replace"), new_text = str_arg(r, 1, "new", "replace");
    int64_t count = r.get(2, "count", Value::integer(-1)).as_int();
    check_replace_size(ev, s, old_text, new_text, count);
    std::string out = py_replace(s, old_text, new_text, count);
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    int64_t at = py_find(s, str_arg(r, 0, "sub", name.c_str()), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw TemplateError("substring not found");
    return Value::integer(at);
  }
  if (name == "count") return Value::integer(py_count(s, str_arg(r, 0, "sub", "count")));
  if (name == "format") return Value::string(str_format(s, a));
  if (name == "join") {
    std::string out;
    bool first = true;
    size_t i = 0;
    for (const Value& item : iterate(r.require(0, "iterable"))) {
      if (!item.is_string())
        throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      ev.check_size(out.size(), "joined string");
      ++i;
    }
    return Value::string(std::move(out));
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return all_chars<py_isdigit>(self);
  if (name == "isalpha") return all_chars<py_isalpha>(self);
  if (name == "isalnum") return all_chars<py_isalnum>(self);
  if (name == "isspace") return all_chars<py_isspace>(self);
  if (name == "isupper") return case_check(self, true);
  if (name == "islower") return case_check(self, false);
  if (name == "center") return justify(ev, self, a, 'c');
  if (name == "ljust") return justify(ev, self, a, 'l');
  if (name == "rjust") return justify(ev, self, a, 'r');
  if (name == "zfill") {
    int64_t width = r.require(0, "width").as_int();
    int64_t len = length(self);
    if (width <= len) return self;
    ev.check_size(static_cast<size_t>(width), "padded string");
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = str_arg(r, 0, "sep", name.c_str());
    if (sep.empty()) throw TemplateError("empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::tuple({self, Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), self});
    return Value::tuple({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = str_arg(r, 0, name == "removeprefix" ? "prefix" : "suffix", name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::string(s.substr(0, s.size() - x.size()));
    return self;
  }
  throw TemplateError("str has no method '" + name + "'");
}

const char* const kStrMethods[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "upper", "lower",
    "casefold", "title", "capitalize", "swapcase", "replace", "find", "rfind", "index", "rindex", "count",
    "format", "join", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "isupper",
    "islower", "center", "ljust", "rjust", "zfill", "partition", "rpartition", "removeprefix", "removesuffix"};

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  ArgReader r(a, name.c_str());
  const Dict& d = self.as_dict();
  if (name == "items") {
    ValueList out;
    for (const auto& [k, v] : d.entries) out.push_back(Value::tuple({k, v}));
    return Value::dict_view(std::move(out), DictView::ITEMS);
  }
  if (name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : d.entries) out.push_back(name == "keys" ? k : v);
    return Value::dict_view(std::move(out), name == "keys" ? DictView::KEYS : DictView::VALUES);
  }
  if (name == "get") {
    const Value* v = d.find(r.require(0, "key"));
    return v ? *v : r.get(1, "default", Value::none());
  }
  if (name == "copy") return Value::dict(std::make_shared<Dict>(d));
  throw TemplateError("dict has no method '" + name + "'");
}

Value seq_method(const Value& self, const std::string& name, CallArgs& a) {
  ArgReader r(a, name.c_str());
  const ValueList& items = self.items();
  if (name == "index") {
    Value x = r.require(0, "value");
    for (size_t i = 0; i < items.size(); ++i)
      if (equals(items[i], x)) return Value::integer(static_cast<int64_t>(i));
    throw TemplateError(repr(x) + " is not in " + type_name(self));
  }
  if (name == "count") {
    Value x = r.require(0, "value");
    int64_t n = 0;
    for (const Value& v : items) n += equals(v, x) ? 1 : 0;
    return Value::integer(n);
  }
  if (name == "copy") return Value::list(items);
  throw TemplateError(std::string(type_name(self)) + " has no method '" + name + "'");
}

Value unsafe_attr(const Value& obj, const std::string& name) {
  return Value::unsafe("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

}  // namespace

std::optional<Value> find_method(Evaluator& ev, const Value& obj, const std::string& name) {
  bool dunder = name.size() > 1 && name[0] == '_' && name[1] == '_';
  Evaluator* evp = &ev;
  switch (obj.kind()) {
    case Kind::STRING:
      if (dunder) return unsafe_attr(obj, name);
      for (const char* m : kStrMethods)
        if (name == m)
          return Value::function(name, [evp, obj, name](CallArgs& a) { return str_method(*evp, obj, name, a); },
                                 "builtin_function_or_method", type_name(obj));
      return std::nullopt;
    case Kind::DICT:
      if (dunder) return unsafe_attr(obj, name);
      if (is_one_of(name, {"items", "keys", "values", "get", "copy"}))
        return Value::function(
            name, [obj, name](CallArgs& a) { return dict_method(obj, name, a); }, "builtin_function_or_method", type_name(obj));
      if (is_one_of(name, {"clear", "pop", "popitem", "setdefault", "update", "fromkeys"})) return unsafe_attr(obj, name);
      return std::nullopt;
    case Kind::LIST:
    case Kind::TUPLE:
      if (dunder) return unsafe_attr(obj, name);
      if (obj.view() != DictView::NONE) return std::nullopt;  // views have no list methods
      if (is_one_of(name, {"index", "count"}) || (obj.is_list() && name == "copy"))
        return Value::function(
            name, [obj, name](CallArgs& a) { return seq_method(obj, name, a); }, "builtin_function_or_method", type_name(obj));
      if (obj.is_list() && is_one_of(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}))
        return unsafe_attr(obj, name);
      return std::nullopt;
    default:
      if (dunder && !obj.is_none() && !obj.is_undefined()) return unsafe_attr(obj, name);
      return std::nullopt;
  }
}

}  // namespace spark::jinja
