// error.h — TemplateError, the one exception a chat template can raise, and render limits.
#pragma once
#include <cstddef>
#include <string>

#include "engine/util/check.h"

namespace spark {

// A template that cannot be parsed or rendered, or that called raise_exception().
// It is bad input (the template or the messages come from outside), hence an InputError.
struct TemplateError : InputError {
  // The jinja2 exception class this error stands for, so that callers and the differential
  // test against jinja2 can tell a missing field from a template bug: SYNTAX is
  // TemplateSyntaxError, UNDEFINED is UndefinedError, RAISED is raise_exception()'s
  // TemplateError, OTHER is anything else (TypeError, SecurityError, our budgets, ...).
  enum class Kind { OTHER, SYNTAX, UNDEFINED, RAISED };
  explicit TemplateError(const std::string& message, Kind error_kind = Kind::OTHER)
      : InputError(message), kind(error_kind) {}
  Kind kind;
};

namespace jinja {

// Budgets that keep a hostile template from exhausting stack, memory or time.
// Python's jinja2 would hit its own recursion limit or run away; we stop cleanly.
struct Limits {
  int max_parse_depth = 100;           // nesting of expressions and blocks in the source
  int max_eval_depth = 600;            // nested expression / statement evaluation at run time
  int max_macro_depth = 100;           // macro calls inside macro calls (recursion)
  size_t max_output_bytes = 32u << 20; // total rendered text (a long prompt is well under 1 MiB)
  size_t max_string_bytes = 16u << 20; // any one string or list built while rendering
  size_t max_steps = 2'000'000;        // loop iterations + calls + outputs, a time budget
  size_t max_range = 100'000;          // range() length, as jinja2's sandbox (MAX_RANGE)
};

}  // namespace jinja
}  // namespace spark
