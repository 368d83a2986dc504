// globals.cpp — the functions every chat template can call: jinja2's range, dict, namespace,
// cycler and joiner, and transformers' raise_exception and strftime_now.
#include <ctime>

#include "engine/template/jinja/evaluator.h"

namespace spark::jinja {
namespace {

Value g_range(CallArgs& a) {
  if (!a.kwargs.empty()) throw TemplateError("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3)
    throw TemplateError("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
  for (const Value& v : a.args)
    if (!v.is_int() && !v.is_bool())
      throw TemplateError(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  // Count without overflow: the sandbox refuses more than MAX_RANGE items.
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 mag = step > 0 ? step : -static_cast<__int128>(step);
  __int128 n = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (n > 100000)
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  out.reserve(static_cast<size_t>(n));
  for (__int128 i = 0; i < n; ++i) out.push_back(Value::integer(static_cast<int64_t>(start + i * step)));
  return Value::list(std::move(out));
}

Value dict_from(CallArgs& a, const char* what) {
  auto d = std::make_shared<Dict>();
  if (a.args.size() > 1) throw TemplateError(std::string(what) + " expected at most 1 positional argument");
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().entries) d->set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2) throw TemplateError("dictionary update sequence element has the wrong length");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kwargs) d->set(k, v);
  return Value::dict(d);
}

Value g_namespace(CallArgs& a) {
  Value d = dict_from(a, "namespace");
  for (const auto& [k, v] : d.as_dict().entries)
    if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
      throw TemplateError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                          k.as_string() + "'. Please rename the attribute.");
  // Not make_shared: the arena's weak reference must not keep the object's memory alive.
  std::shared_ptr<Dict> attrs(new Dict(d.as_dict()));
  return Value::namespace_(attrs);
}

Value g_raise_exception(CallArgs& a) {
  throw TemplateError(a.args.empty() ? std::string("raise_exception() called") : to_str(a.args[0]),
                      TemplateError::Kind::RAISED);
}

Value g_strftime_now(CallArgs& a) {
  if (a.args.empty()) throw TemplateError("strftime_now() missing required argument 'format'");
  std::string fmt = to_str(a.args[0]);
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256 + fmt.size() * 4, '\0');
  size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &local);
  out.resize(n);
  return Value::string(out);
}

Value g_cycler(CallArgs& a) {
  if (a.args.empty()) throw TemplateError("at least one item has to be provided");
  auto items = std::make_shared<ValueList>(a.args);
  auto pos = std::make_shared<size_t>(0);
  auto attrs = std::make_shared<Dict>();
  attrs->set("items", Value::list(*items));
  attrs->set("next", Value::function("next", [items, pos](CallArgs&) {
    Value v = (*items)[*pos];
    *pos = (*pos + 1) % items->size();
    return v;
  }));
  attrs->set("reset", Value::function("reset", [pos](CallArgs&) {
    *pos = 0;
    return Value::none();
  }));
  attrs->set("current", (*items)[0]);
  return Value::object(attrs);
}

Value g_joiner(CallArgs& a) {
  std::string sep = a.args.empty() ? ", " : to_str(a.args[0]);
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

}  // namespace

void add_globals(Dict& globals) {
  // Types as Python names them: range is a builtin, namespace / cycler / joiner are classes.
  globals.set("range", Value::function("range", g_range, "builtin_function_or_method"));
  globals.set("dict", Value::function("dict", [](CallArgs& a) { return dict_from(a, "dict"); },
                                        "transformers.utils.chat_template_utils.TemplateDict"));
  globals.set("namespace", Value::function("namespace", g_namespace, "type"));
  globals.set("raise_exception", Value::function("raise_exception", g_raise_exception));
  globals.set("strftime_now", Value::function("strftime_now", g_strftime_now));
  globals.set("cycler", Value::function("cycler", g_cycler, "type"));
  globals.set("joiner", Value::function("joiner", g_joiner, "type"));
}

}  // namespace spark::jinja
