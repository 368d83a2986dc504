// scoping.h — jinja2's static scoping rule, applied to a parsed template before it renders:
// a name assigned in a scope before anything there reads it is that scope's own variable,
// undefined until the assignment (see scoping.cpp).
#pragma once
#include <string>
#include <vector>

#include "engine/template/jinja/ast.h"

namespace spark::jinja {

// Fills Stmt::fresh / Stmt::else_fresh throughout `body`; returns the names that start
// undefined at the template's top level.
std::vector<std::string> analyze_scopes(Body& body);

}  // namespace spark::jinja
