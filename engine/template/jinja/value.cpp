// value.cpp — construction, truthiness, equality, ordering and printing of Jinja values,
// each following what CPython does for the same Python object.
#include "engine/template/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/template/jinja/error.h"
#include "engine/template/jinja/pyformat.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {

const std::string& Value::empty_string() {
  static const std::string empty;
  return empty;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::unsafe(std::string message) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(message));
  v.unsafe_ = true;
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::NONE;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::BOOL;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::INT;
  v.i_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::FLOAT;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::STRING;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

static int items_depth(const ValueList& items) {
  int d = 0;
  for (const Value& item : items) d = std::max(d, item.nesting());
  if (d + 1 > kMaxNesting)
    throw TemplateError("value nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
  return d + 1;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::LIST;
  v.depth_ = items_depth(items);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::TUPLE;
  return v;
}

Value Value::dict_view(ValueList items, DictView which) {
  Value v = list(std::move(items));
  v.view_ = which;
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::DICT;
  v.dict_ = std::move(d);
  return v;
}

Value Value::iterator(ValueList items, std::string type_name) {
  Value v;
  v.kind_ = Kind::ITERATOR;
  v.iter_ = std::make_shared<IterState>();
  v.depth_ = items_depth(items);
  v.iter_->items = std::move(items);
  v.iter_->type_name = std::move(type_name);
  return v;
}

Value Value::generator(std::string function, std::function<ValueList()> body, int inputs_nesting) {
  const int deepest = inputs_nesting;
  // A generator over a generator nests its pending bodies: bound the chain as containers are.
  if (deepest + 1 > kMaxNesting)
    throw TemplateError("value nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
  Value v = iterator({});
  v.depth_ = deepest + 1;
  v.iter_->body = std::move(body);
  v.iter_->function = std::move(function);
  return v;
}

ValueList& IterState::ready() {
  if (body) {
    auto run = std::move(body);
    body = nullptr;
    items = run();
  }
  return items;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> fn, std::string type, std::string receiver) {
  Value v;
  v.kind_ = Kind::FUNCTION;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), std::move(type), std::move(receiver)});
  return v;
}

namespace {
thread_local NamespaceArena* current_arena = nullptr;
}

NamespaceArena::NamespaceArena() : previous_(current_arena) { current_arena = this; }

NamespaceArena::~NamespaceArena() {
  current_arena = previous_;
  for (auto& weak : made_) {
    if (auto d = weak.lock()) {
      std::vector<std::pair<Value, Value>> entries;
      entries.swap(d->entries);  // destroyed here, after d no longer refers to them
      d->index.clear();
    }
  }
}

void NamespaceArena::track(const std::shared_ptr<Dict>& attrs) {
  NamespaceArena* a = current_arena;
  if (!a) return;
  a->made_.push_back(attrs);
  if (a->made_.size() >= a->compact_at_) {  // forget namespaces already freed
    std::erase_if(a->made_, [](const std::weak_ptr<Dict>& w) { return w.expired(); });
    a->compact_at_ = std::max<size_t>(1024, 2 * a->made_.size());
  }
}

Value Value::object(std::shared_ptr<Dict> attrs) {
  Value v;
  v.kind_ = Kind::NAMESPACE;
  v.dict_ = std::move(attrs);
  return v;
}

Value Value::namespace_(std::shared_ptr<Dict> attrs) {
  attrs->assignable = true;
  NamespaceArena::track(attrs);
  Value v;
  v.kind_ = Kind::NAMESPACE;
  v.dict_ = std::move(attrs);
  return v;
}

void raise_undefined(const Value& undefined, const std::string& fallback) {
  const std::string& hint = undefined.as_string();
  throw TemplateError(hint.empty() ? fallback : hint,
                      undefined.is_unsafe() ? TemplateError::Kind::OTHER : TemplateError::Kind::UNDEFINED);
}

Value make_undefined_name(const std::string& name) {
  return Value::undefined("'" + name + "' is undefined");
}

int Value::nesting() const {
  switch (kind_) {
    case Kind::LIST:
    case Kind::TUPLE:
    case Kind::ITERATOR: return depth_;
    case Kind::DICT:
    case Kind::NAMESPACE: return dict_->depth;
    default: return 0;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::UNDEFINED: return false;
    case Kind::NONE: return false;
    case Kind::BOOL: return b_;
    case Kind::INT: return i_ != 0;
    case Kind::FLOAT: return f_ != 0.0;
    case Kind::STRING: return !as_string().empty();
    case Kind::LIST:
    case Kind::TUPLE: return !list_->empty();
    case Kind::DICT: return dict_->size() != 0;
    default: return true;
  }
}

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Kind::STRING: return "s" + v.as_string();
    case Kind::BOOL:
    case Kind::INT: return "i" + std::to_string(v.as_int());
    case Kind::FLOAT: {
      double f = v.as_float();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
        return "i" + std::to_string(static_cast<int64_t>(f));
      return "f" + float_repr(f);
    }
    case Kind::NONE: return "n";
    case Kind::TUPLE: {
      std::string k = "t(";
      for (const Value& item : v.items()) k += hash_key(item) + "\x1f";
      return k + ")";
    }
    default: throw TemplateError(std::string("unhashable type: '") + type_name(v) + "'");
  }
}

const Value* Dict::find(const Value& key) const {
  if (!(key.is_string() || key.is_number() || key.is_none() || key.is_tuple())) return nullptr;
  auto it = index.find(hash_key(key));
  return it == index.end() ? nullptr : &entries[it->second].second;
}

const Value* Dict::find(const std::string& key) const {
  auto it = index.find("s" + key);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

void Dict::set(const Value& key, Value value) {
  int d = std::max(key.nesting(), value.nesting()) + 1;
  if (d > kMaxNesting)
    throw TemplateError("value nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
  depth = std::max(depth, d);
  std::string k = hash_key(key);
  auto it = index.find(k);
  if (it != index.end()) {
    entries[it->second].second = std::move(value);
    return;
  }
  index.emplace(std::move(k), entries.size());
  entries.emplace_back(key, std::move(value));
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::UNDEFINED: return "Undefined";
    case Kind::NONE: return "NoneType";
    case Kind::BOOL: return "bool";
    case Kind::INT: return "int";
    case Kind::FLOAT: return "float";
    case Kind::STRING: return "str";
    case Kind::LIST:
      switch (v.view()) {
        case DictView::KEYS: return "dict_keys";
        case DictView::VALUES: return "dict_values";
        case DictView::ITEMS: return "dict_items";
        case DictView::NONE: break;
      }
      return "list";
    case Kind::TUPLE: return "tuple";
    case Kind::DICT: return "dict";
    case Kind::ITERATOR: return v.iter().type_name.c_str();
    case Kind::FUNCTION: return v.callable().type.c_str();
    case Kind::NAMESPACE: return "Namespace";
  }
  return "object";
}

static void repr_into(std::string& out, const Value& v, int depth);

// The dicts being printed, outermost first: Python prints a dict that contains itself
// (through a namespace that holds itself) as {...} where it recurs.
static thread_local std::vector<const Dict*> printing;

static void repr_dict_into(std::string& out, const Dict& d, int depth) {
  for (const Dict* p : printing)
    if (p == &d) {
      out += "{...}";
      return;
    }
  printing.push_back(&d);
  struct Pop {
    ~Pop() { printing.pop_back(); }
  } pop;
  out += '{';
  bool first = true;
  for (const auto& [k, val] : d.entries) {
    if (!first) out += ", ";
    first = false;
    repr_into(out, k, depth + 1);
    out += ": ";
    repr_into(out, val, depth + 1);
  }
  out += '}';
}

static void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > 500) throw TemplateError("value nested too deeply to print");
  check_formatted_size(out.size());
  switch (v.kind()) {
    case Kind::STRING:
      check_formatted_size(out.size() + v.as_string().size());
      out += string_repr(v.as_string());
      return;
    case Kind::UNDEFINED: out += "Undefined"; return;
    case Kind::LIST:
    case Kind::TUPLE: {
      bool tuple = v.is_tuple();
      if (v.view() != DictView::NONE) out += std::string(type_name(v)) + "(";
      out += tuple ? '(' : '[';
      const ValueList& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i], depth + 1);
      }
      if (tuple && items.size() == 1) out += ',';
      out += tuple ? ')' : ']';
      if (v.view() != DictView::NONE) out += ')';
      return;
    }
    case Kind::DICT: repr_dict_into(out, v.as_dict(), depth); return;
    case Kind::NAMESPACE:
      out += "<Namespace ";
      repr_dict_into(out, v.as_dict(), depth);
      out += '>';
      return;
    case Kind::ITERATOR: {
      // Python's repr: the object's address, which no two runs share (tests compare without it).
      char address[32];
      std::snprintf(address, sizeof address, " at %p>", static_cast<const void*>(&v.iter()));
      const IterState& it = v.iter();
      out += "<" + it.type_name + " object" + (it.function.empty() ? "" : " " + it.function) + address;
      return;
    }
    case Kind::FUNCTION: {
      // Python's reprs for the callables templates print by mistake; others keep a short form.
      const Callable& f = v.callable();
      char address[32];
      std::snprintf(address, sizeof address, " at %p>", static_cast<const void*>(&f));
      if (f.type == "jinja2.runtime.Macro") out += "<Macro '" + f.name + "'>";
      else if (f.type == "builtin_function_or_method" && !f.receiver.empty())
        out += "<built-in method " + f.name + " of " + f.receiver + " object" + address;
      else out += "<function " + f.name + ">";
      return;
    }
    default: out += to_str(v); return;
  }
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::UNDEFINED: return "";  // also a sandbox-denied attribute: only using it raises
    case Kind::NONE: return "None";
    case Kind::BOOL: return v.as_bool() ? "True" : "False";
    case Kind::INT: return std::to_string(v.as_int());
    case Kind::FLOAT: return float_repr(v.as_float());
    case Kind::STRING: return v.as_string();
    default: return repr(v);
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  if (a.view() != b.view()) return false;
  // Python compares keys and items views as sets; a values view equals only itself.
  if (a.view() == DictView::VALUES) return &a.items() == &b.items();
  if (a.view() != DictView::NONE) {
    if (a.items().size() != b.items().size()) return false;
    for (const Value& x : a.items()) {
      bool found = false;
      for (const Value& y : b.items())
        if ((found = equals(x, y))) break;
      if (!found) return false;
    }
    return true;
  }
  switch (a.kind()) {
    case Kind::UNDEFINED:
    case Kind::NONE: return true;
    case Kind::STRING: return a.as_string() == b.as_string();
    case Kind::LIST:
    case Kind::TUPLE: {
      const ValueList &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::DICT: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(val, *other)) return false;
      }
      return true;
    }
    case Kind::NAMESPACE: return a.dict_ptr() == b.dict_ptr();
    case Kind::ITERATOR: return &a.iter() == &b.iter();
    case Kind::FUNCTION: return &a.callable() == &b.callable();
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    raise_undefined(u, "undefined value used in a comparison");
  }
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.kind() == b.kind() && a.is_sequence() && b.is_sequence()) {
    const ValueList &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError(std::string("'<' not supported between instances of '") + type_name(a) +
                      "' and '" + type_name(b) + "'");
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::LIST:
    case Kind::TUPLE: return v.items();
    case Kind::DICT: {
      ValueList keys;
      keys.reserve(v.as_dict().size());
      for (const auto& entry : v.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::STRING: {
      ValueList chars;
      for (char32_t cp : utf8_decode(v.as_string())) {
        std::string s;
        utf8_append(s, cp);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    case Kind::ITERATOR: {
      IterState& it = v.iter();
      const ValueList& items = it.ready();
      ValueList rest(items.begin() + static_cast<std::ptrdiff_t>(it.pos), items.end());
      it.pos = items.size();
      return rest;
    }
    case Kind::UNDEFINED: return {};
    default:
      throw TemplateError(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::STRING: return static_cast<int64_t>(utf8_length(v.as_string()));
    case Kind::LIST:
    case Kind::TUPLE: return static_cast<int64_t>(v.items().size());
    case Kind::DICT: return static_cast<int64_t>(v.as_dict().size());
    case Kind::UNDEFINED: return 0;
    default:
      throw TemplateError(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 256) throw TemplateError("JSON input nested too deeply (more than 256 levels)");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (const auto& [k, item] : j.items()) d.as_dict().set(k, from_json(item, depth + 1));
      return d;
    }
    default: return Value::none();
  }
}

}  // namespace spark::jinja
