// value.h — the Jinja value model: Python's None/bool/int/float/str/list/tuple/dict plus
// jinja2's Undefined, one-shot iterators (what map/select return), callables and namespaces.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spark::jinja {

class Value;
using ValueList = std::vector<Value>;

constexpr int kMaxNesting = 512;  // containers inside containers, at most

enum class Kind : uint8_t {
  UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, LIST, TUPLE, DICT, ITERATOR, FUNCTION, NAMESPACE
};

struct Dict;
struct Callable;

// dict.keys() / .values() / .items(): Python's view objects. sparkd keeps them as LIST values
// with this tag: they iterate, count and test membership as lists do, but are no sequence
// (no indexing, slicing or list methods), print as dict_keys([...]) and name their own type.
enum class DictView : uint8_t { NONE, KEYS, VALUES, ITEMS };
struct IterState;

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value unsafe(std::string message);  // sandbox-denied attribute: calling or reading it raises
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict_view(ValueList items, DictView which);  // kind LIST, is_list() false
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d);
  static Value iterator(ValueList items, std::string type_name = "generator");
  // A generator whose body runs when it is first consumed (see IterState::body).
  // `inputs_nesting`, the deepest nesting() of the values the body reads, bounds how deeply
  // generators can chain.
  static Value generator(std::string function, std::function<ValueList()> body, int inputs_nesting);
  // `type` is the Python type the callable stands for (a builtin method, a jinja2 macro,
  // ...), which error messages name.
  static Value function(std::string name, std::function<Value(CallArgs&)> fn, std::string type = "function",
                        std::string receiver = "");
  static Value namespace_(std::shared_ptr<Dict> attrs);  // a namespace() templates may assign to
  static Value object(std::shared_ptr<Dict> attrs);      // read-only attributes (loop, cycler)

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::UNDEFINED; }
  bool is_none() const { return kind_ == Kind::NONE; }
  bool is_bool() const { return kind_ == Kind::BOOL; }
  bool is_int() const { return kind_ == Kind::INT; }
  bool is_float() const { return kind_ == Kind::FLOAT; }
  bool is_number() const { return kind_ == Kind::INT || kind_ == Kind::FLOAT || kind_ == Kind::BOOL; }
  bool is_string() const { return kind_ == Kind::STRING; }
  bool is_list() const { return kind_ == Kind::LIST && view_ == DictView::NONE; }
  bool is_tuple() const { return kind_ == Kind::TUPLE; }
  bool is_sequence() const { return is_list() || kind_ == Kind::TUPLE; }
  DictView view() const { return view_; }
  bool is_dict() const { return kind_ == Kind::DICT; }
  bool is_iterator() const { return kind_ == Kind::ITERATOR; }
  bool is_callable() const { return kind_ == Kind::FUNCTION; }
  bool is_namespace() const { return kind_ == Kind::NAMESPACE; }
  bool is_unsafe() const { return kind_ == Kind::UNDEFINED && unsafe_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::BOOL ? (b_ ? 1 : 0) : i_; }  // bool is an int
  double as_float() const { return kind_ == Kind::FLOAT ? f_ : static_cast<double>(as_int()); }
  // String text; for an undefined, its hint. Shared: copying a Value never copies text.
  const std::string& as_string() const { return s_ ? *s_ : empty_string(); }
  const ValueList& items() const { return *list_; }      // list / tuple
  Dict& as_dict() const { return *dict_; }               // dict / namespace attributes
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  IterState& iter() const { return *iter_; }
  const Callable& callable() const { return *fn_; }

  // Python truthiness (an undefined is false; an iterator is always true, as in Python).
  bool truthy() const;
  // How deeply containers nest inside this value (0 for scalars). Bounded by kMaxNesting so
  // that comparing, printing and freeing values never recurses without limit.
  int nesting() const;

 private:
  Kind kind_ = Kind::UNDEFINED;
  bool b_ = false;
  bool unsafe_ = false;
  DictView view_ = DictView::NONE;
  int depth_ = 0;  // LIST / TUPLE / ITERATOR: 1 + the deepest item
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  static const std::string& empty_string();
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<IterState> iter_;
  std::shared_ptr<Callable> fn_;
};

// An insertion-ordered mapping, as Python's dict. Keys are hashable values.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;  // 1 + the deepest value ever stored (namespaces can change after creation)
  bool assignable = false;  // `{% set ns.attr = ... %}` allowed: namespace() objects only
  std::unordered_map<std::string, size_t> index;  // hash_key(key) -> position in entries

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  void set(const std::string& key, Value value) { set(Value::string(key), std::move(value)); }
  size_t size() const { return entries.size(); }
};

struct IterState {
  ValueList items;
  size_t pos = 0;
  std::string type_name;
  // jinja2's map, select, unique, batch, ... are Python generators: their body runs only
  // when something iterates them, so a generator that is merely tested for truth or printed
  // raises nothing, and its errors surface where it is consumed. `body` is that pending
  // work (run once, then cleared); `function` is its Python name, which repr() shows.
  std::function<ValueList()> body;
  std::string function;
  ValueList& ready();  // the items, after running a pending body
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
  std::string type;
  std::string receiver;  // a bound method's object type ("str", "dict", ...), for repr()
};

// A template can make a namespace hold itself (`{% set ns.me = [ns] %}`), a reference cycle
// shared_ptr cannot free. While an arena is installed on a thread, every namespace made
// there is recorded; the arena empties them when it ends, which breaks the cycles.
class NamespaceArena {
 public:
  NamespaceArena();
  ~NamespaceArena();
  NamespaceArena(const NamespaceArena&) = delete;
  NamespaceArena& operator=(const NamespaceArena&) = delete;
  static void track(const std::shared_ptr<Dict>& attrs);

 private:
  std::vector<std::weak_ptr<Dict>> made_;
  size_t compact_at_ = 1024;
  NamespaceArena* previous_;
};

// The identity Python's dict uses for a key (True, 1 and 1.0 are the same key);
// throws TemplateError for unhashable values.
std::string hash_key(const Value& v);

const char* type_name(const Value& v);  // Python's type name: "str", "int", "dict", ...
std::string to_str(const Value& v);     // Python's str(v), jinja2's printing
std::string repr(const Value& v);       // Python's repr(v)
bool equals(const Value& a, const Value& b);  // Python ==
// Python <, as used by comparisons and sort; throws TemplateError for unorderable types.
bool less_than(const Value& a, const Value& b);

// Materializes anything iterable (list, tuple, dict keys, string chars, iterator: consumed,
// undefined: empty); throws TemplateError for the rest.
ValueList iterate(const Value& v);
// len(v); throws TemplateError where Python would.
int64_t length(const Value& v);

// Throws the error using an undefined value raises: its hint ("'x' is undefined", ...) or
// `fallback`; UNDEFINED, except for a sandbox-denied attribute (jinja2's SecurityError).
[[noreturn]] void raise_undefined(const Value& undefined, const std::string& fallback);

Value from_json(const nlohmann::ordered_json& j, int depth = 0);
Value make_undefined_name(const std::string& name);

}  // namespace spark::jinja
