// fuzz_chat_template.cpp — libFuzzer target: any bytes as a chat template, rendered over a
// conversation with tools. Bad templates must end in TemplateError; nothing may crash, hang
// or exhaust memory (the render budgets bound time, depth and size).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/template/chat_template.h"

namespace {

const nlohmann::ordered_json& messages() {
  static const nlohmann::ordered_json m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? \u00e9 \ud83d\udc4d"},
    {"role": "assistant", "content": "<think>\nplan\n</think>\n\n", "reasoning_content": "plan",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "c1", "name": "get_weather"},
    {"role": "assistant", "content": "It is 21.5 degrees."},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
  ])");
  return m;
}

const nlohmann::ordered_json& tools() {
  static const nlohmann::ordered_json t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer", "default": 1}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
  ])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    spark::ChatTemplate t = spark::ChatTemplate::from_source(source, "<s>", "</s>");
    nlohmann::ordered_json kwargs = {{"enable_thinking", true}, {"date_string", "26 Jul 2024"}};
    (void)t.render(messages(), tools(), true, kwargs);
    (void)t.render(messages(), nlohmann::ordered_json(), false);
  } catch (const spark::InputError&) {
    // TemplateError derives from InputError: the expected outcome for a bad template.
  }
  return 0;
}
