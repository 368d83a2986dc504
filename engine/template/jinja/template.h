// template.h — a compiled Jinja template: parse once, render many times with different
// variables, as jinja2's Environment.from_string(...).render(...) under transformers' settings.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/template/jinja/ast.h"
#include "engine/template/jinja/error.h"
#include "engine/template/jinja/value.h"

namespace spark::jinja {

class Template {
 public:
  // Throws TemplateError for syntax errors (with the line) and nesting past the limits.
  explicit Template(const std::string& source, Limits limits = {});

  // `variables` is a dict value; throws TemplateError for render errors, raise_exception()
  // and exhausted budgets. Safe to call from several threads at once.
  std::string render(const Value& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::shared_ptr<const Body> body_;
  std::vector<std::string> root_fresh_;  // names undefined when rendering starts (scoping.h)
  Limits limits_;
};

}  // namespace spark::jinja
