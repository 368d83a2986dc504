// template.cpp — ties the lexer, parser and evaluator together.
#include "engine/tokenizer/jinja/template.h"

#include "engine/tokenizer/jinja/evaluator.h"
#include "engine/tokenizer/jinja/lexer.h"
#include "engine/tokenizer/jinja/parser.h"

namespace spark::jinja {

Template::Template(const std::string& source, Limits limits) : limits_(limits) {
  body_ = std::make_shared<const Body>(parse_template(tokenize(source), limits_));
}

std::string Template::render(const Value& variables) const {
  Evaluator ev(limits_);
  return ev.render(*body_, variables);
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  return render(from_json(variables));
}

}  // namespace spark::jinja
