// template.cpp — `sparkd template`: one JSON request on stdin, the rendered chat prompt on
// stdout, byte for byte (no newline added), for scripts and for checking against transformers.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/commands/commands.h"
#include "engine/template/chat_template.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"

namespace spark {

int run_template(const Args& args) {
  Flags flags(args);
  flags.expect_only({"model", "chat-template"});
  if (!flags.has("model"))
    throw InputError("usage: sparkd template --model PATH [--chat-template FILE.jinja] < request.json");
  ChatTemplate tmpl = ChatTemplate::from_model(flags.require("model"), flags.get("chat-template").value_or(""));

  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::ordered_json request;
  try {
    request = nlohmann::ordered_json::parse(input);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw InputError(std::string("stdin is not valid JSON: ") + e.what());
  }
  if (!request.is_object()) throw InputError("stdin must hold a JSON object with \"messages\"");
  if (!request.contains("messages")) throw InputError("the request has no \"messages\"");

  nlohmann::ordered_json tools = request.contains("tools") ? request["tools"] : nlohmann::ordered_json();
  bool add_generation_prompt = false;
  if (request.contains("add_generation_prompt") && !request["add_generation_prompt"].is_null()) {
    if (!request["add_generation_prompt"].is_boolean()) throw InputError("\"add_generation_prompt\" must be true or false");
    add_generation_prompt = request["add_generation_prompt"].get<bool>();
  }
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  for (const auto& [key, value] : request.items())
    if (key != "messages" && key != "tools" && key != "add_generation_prompt") kwargs[key] = value;

  std::string prompt = tmpl.render(request["messages"], tools, add_generation_prompt, kwargs);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace spark
