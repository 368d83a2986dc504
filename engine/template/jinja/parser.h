// parser.h — builds the syntax tree from tokens, following jinja2's grammar and operator
// precedence; nesting deeper than Limits::max_parse_depth is refused.
#pragma once
#include <string>
#include <vector>

#include "engine/template/jinja/ast.h"
#include "engine/template/jinja/error.h"
#include "engine/template/jinja/lexer.h"

namespace spark::jinja {

// Throws TemplateError naming the line for any syntax error.
Body parse_template(const std::vector<Token>& tokens, const Limits& limits);

}  // namespace spark::jinja
