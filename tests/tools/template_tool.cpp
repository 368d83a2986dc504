// template_tool.cpp — sparkd's chat-template engine driven from Python in batches, for the
// differential check against jinja2 (tests/integration/test_template_differential.py):
// one process renders thousands of cases. Usage: template_tool < cases.jsonl > results.jsonl
//
// Each input line is one case:
//   {"template": "...", "context": {...}}           the bare engine, as jinja2's
//                                                   from_string(template).render(**context);
//   {"model": PATH, "messages": [...], "tools": [...] or null, "add_generation_prompt": bool,
//    "kwargs": {...}}                               ChatTemplate::from_model(PATH).render(...),
//                                                   the server's path with its normalisation.
// Each output line: {"ok": true, "text": "..."} or {"ok": false, "class": C, "error": "..."},
// C being syntax / undefined / raised / other (TemplateError::Kind), or "internal" for any
// exception that is not a TemplateError (a bug whatever jinja2 does).
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/template/chat_template.h"
#include "engine/template/jinja/template.h"

using namespace spark;
using ojson = nlohmann::ordered_json;

namespace {

const char* class_name(TemplateError::Kind kind) {
  switch (kind) {
    case TemplateError::Kind::SYNTAX: return "syntax";
    case TemplateError::Kind::UNDEFINED: return "undefined";
    case TemplateError::Kind::RAISED: return "raised";
    case TemplateError::Kind::OTHER: break;
  }
  return "other";
}

std::string render_case(const ojson& c, std::map<std::string, ChatTemplate>& models) {
  if (c.contains("template")) {
    const ojson context = c.value("context", ojson::object());
    return jinja::Template(c.at("template").get<std::string>()).render(context);
  }
  const std::string path = c.at("model");
  auto it = models.find(path);
  if (it == models.end()) it = models.emplace(path, ChatTemplate::from_model(path)).first;
  const ojson tools = c.value("tools", ojson());
  return it->second.render(c.at("messages"), tools, c.value("add_generation_prompt", false),
                           c.value("kwargs", ojson::object()));
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::map<std::string, ChatTemplate> models;
  std::string line;
  while (std::getline(std::cin, line)) {
    ojson out;
    try {
      out = {{"ok", true}, {"text", render_case(ojson::parse(line), models)}};
    } catch (const TemplateError& e) {
      out = {{"ok", false}, {"class", class_name(e.kind)}, {"error", e.what()}};
    } catch (const std::exception& e) {
      out = {{"ok", false}, {"class", "internal"}, {"error", e.what()}};
    }
    // Rendered text is compared byte for byte; invalid UTF-8 (none expected) is replaced
    // rather than aborting the whole batch.
    std::cout << out.dump(-1, ' ', false, ojson::error_handler_t::replace) << '\n';
  }
  return 0;
}
