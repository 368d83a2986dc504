// template.cpp — ties the lexer, parser and evaluator together.
#include "engine/template/jinja/template.h"

#include "engine/template/jinja/evaluator.h"
#include "engine/template/jinja/lexer.h"
#include "engine/template/jinja/parser.h"
#include "engine/template/jinja/scoping.h"

namespace spark::jinja {

Template::Template(const std::string& source, Limits limits) : limits_(limits) {
  auto body = std::make_shared<Body>(parse_template(tokenize(source), limits_));
  root_fresh_ = analyze_scopes(*body);
  fold_constants(*body, limits_);
  body_ = std::move(body);
}

std::string Template::render(const Value& variables) const {
  Evaluator ev(limits_);
  return ev.render(*body_, variables, root_fresh_);
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  return render(from_json(variables));
}

}  // namespace spark::jinja
