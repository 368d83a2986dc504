// pyformat.h — Python's text forms of values: float repr, str repr, json.dumps, the `%`
// operator and str.format, so rendered text matches CPython byte for byte.
#pragma once
#include <optional>
#include <string>

#include "engine/template/jinja/value.h"

namespace spark::jinja {

// Text built by repr, json.dumps and formatting stops here (TemplateError): a template can
// make a small value print enormously (a list of a million references to a long string).
constexpr size_t kMaxFormattedBytes = 16u << 20;
void check_formatted_size(size_t bytes);

std::string float_repr(double f);                  // repr(1.0) == "1.0", repr(1e16) == "1e+16"
std::string string_repr(const std::string& s);     // repr('it''s') == "\"it's\""
int64_t float_to_int(double f);                    // int(f), truncating; TemplateError when out of range

struct JsonOptions {
  bool ensure_ascii = false;          // transformers' tojson default
  std::optional<std::string> indent;  // None: one line; else the text of one indent level
  std::optional<std::string> item_separator, key_separator;  // None: Python's defaults
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonOptions& options);

// `fmt % args` for str (printf-style); args is a tuple, a dict (for %(name)s) or one value.
std::string percent_format(const std::string& fmt, const Value& args);
// str.format(*args, **kwargs).
std::string str_format(const std::string& fmt, const CallArgs& call);

}  // namespace spark::jinja
