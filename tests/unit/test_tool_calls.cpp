// test_tool_calls.cpp — the output parser on golden and adversarial text: Hermes and Llama
// 3.1 tool calls, <think> reasoning, every split of the text into deltas, and time that
// stays linear on hostile input.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "tests/unit/output_events.h"
#include "web/chat_format/chat_format.h"
#include "web/chat_format/json_call.h"

using namespace spark;
using namespace spark::testing;

namespace {

OutputParserOptions hermes() { return with_tools("hermes"); }

}  // namespace

TEST_CASE("hermes: a Qwen2.5 tool call becomes name + JSON-string arguments") {
  std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
  Parsed p = parse_whole(text, hermes());
  CHECK(p.content.empty());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == "get_weather");
  CHECK(nlohmann::json::parse(p.calls[0].arguments) == nlohmann::json{{"city", "Paris"}, {"days", 3}});
  CHECK(p.calls[0].id.rfind("call_", 0) == 0);
  CHECK(p.calls[0].id.size() == 29);
  check_all_splits(text, hermes());
}

TEST_CASE("hermes: text before, two calls, text after; ids differ") {
  std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"<tool_call>?\"}]}}\n</tool_call>";
  Parsed p = parse_whole(text, hermes());
  CHECK(p.content == "Let me check.\n");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "a");
  CHECK(p.calls[0].arguments == "{}");
  CHECK(p.calls[1].id != p.calls[0].id);
  check_all_splits(text, hermes());
}

TEST_CASE("hermes: a closing tag inside a JSON string ends the body early; the broken call stays text") {
  // The model's own text is what the client gets when the call does not parse.
  std::string text = "<tool_call>{\"name\": \"b\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>";
  Parsed p = parse_whole(text, hermes());
  CHECK(p.calls.empty());
  CHECK(p.content.find("<tool_call>") == 0);
}

TEST_CASE("hermes: arguments given as a JSON string and 'parameters' are accepted") {
  Parsed p = parse_whole("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", hermes());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].arguments == "{\"a\": 1}");
  p = parse_whole("<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": 1}}</tool_call>", hermes());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].arguments == "{\"a\":1}");
}

TEST_CASE("hermes: malformed calls are kept as content, verbatim") {
  for (std::string bad : {"<tool_call>{\"name\": 5}</tool_call>", "<tool_call>not json</tool_call>",
                          "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>[1,2]</tool_call>",
                          "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"f\", \"arguments\": 7}</tool_call>"}) {
    CAPTURE(bad);
    Parsed p = parse_whole(bad, hermes());
    CHECK(p.calls.empty());
    CHECK(p.content == bad);
  }
}

TEST_CASE("hermes: an unclosed call at the end parses if its JSON is complete, else stays text") {
  Parsed p = parse_whole("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1}}\n", hermes());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == "f");
  p = parse_whole("<tool_call>\n{\"name\": \"f\", \"argu", hermes());
  CHECK(p.calls.empty());
  CHECK(p.content == "<tool_call>\n{\"name\": \"f\", \"argu");
}

TEST_CASE("hermes: a partial tag at the end is released as content when the text ends") {
  Parsed p = parse_whole("price < 5 <tool_ca", hermes());
  CHECK(p.content == "price < 5 <tool_ca");
  check_all_splits("a <tool <tool_c <tool_call <tool_call>{\"name\":\"x\"}</tool_call> z", hermes());
}

TEST_CASE("no tools: tags are plain content") {
  OutputParserOptions o;
  std::string text = "<tool_call>{\"name\": \"f\"}</tool_call>";
  CHECK(parse_whole(text, o).content == text);
}

TEST_CASE("think: reasoning split from the answer, with and without the opening tag in the prompt") {
  OutputParserOptions o = hermes();
  o.reasoning = true;
  std::string text = "<think>\nThe user wants weather.\n</think>\n\nSure.<tool_call>{\"name\": \"w\", \"arguments\": {}}</tool_call>";
  Parsed p = parse_whole(text, o);
  CHECK(p.reasoning == "\nThe user wants weather.\n");
  CHECK(p.content == "Sure.");
  CHECK(p.calls.size() == 1);
  check_all_splits(text, o);

  o.starts_in_reasoning = true;
  p = parse_whole("hmm </think>\n\nAnswer", o);
  CHECK(p.reasoning == "hmm ");
  CHECK(p.content == "Answer");

  o.starts_in_reasoning = false;
  p = parse_whole("Direct answer, no thinking.", o);
  CHECK(p.reasoning.empty());
  CHECK(p.content == "Direct answer, no thinking.");
  p = parse_whole("<think>never closed", o);
  CHECK(p.reasoning == "never closed");
}

TEST_CASE("llama 3.1: a JSON answer is a call; prose is content") {
  OutputParserOptions o = with_tools("llama3");
  Parsed p = parse_whole("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", o);
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == "get_weather");
  CHECK(nlohmann::json::parse(p.calls[0].arguments)["city"] == "Oslo");
  p = parse_whole(" {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": \"v;}\"}}", o);
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[1].name == "b");
  p = parse_whole("{\"not\": \"a call\"}", o);
  CHECK(p.calls.empty());
  CHECK(p.content == "{\"not\": \"a call\"}");
  p = parse_whole("The answer is {\"name\": \"x\"}", o);
  CHECK(p.calls.empty());
  check_all_splits("{\"name\": \"a\", \"parameters\": {\"q\": \"}{\"}}", o);
}

TEST_CASE("adversarial text parses in linear time") {
  // Many tag prefixes, unbalanced braces and an unterminated call body of 1 MB.
  std::string hostile;
  for (int i = 0; i < 50000; ++i) hostile += "<tool_ca<think></thin{\"[";
  std::string body = "<tool_call>" + std::string(1 << 20, '{');
  OutputParserOptions llama = with_tools("llama3");
  llama.reasoning = true;
  for (OutputParserOptions o : {hermes(), llama}) {
    auto t0 = std::chrono::steady_clock::now();
    auto parser = make_output_parser(o);
    size_t emitted = 0;
    for (size_t i = 0; i < hostile.size(); i += 7) emitted += parser->push(hostile.substr(i, 7)).size();
    for (size_t i = 0; i < body.size(); i += 4096) emitted += parser->push(body.substr(i, 4096)).size();
    auto tail = parser->finish();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("2.2 MB of hostile text parsed in " << seconds << " s");
    CHECK(seconds < 5.0);  // quadratic behaviour would take minutes
    CHECK(parser->num_tool_calls() == 0);
  }
}

TEST_CASE("json_depth counts nesting outside strings and stops past the limit") {
  CHECK(json_depth("{\"a\": [1, {\"b\": \"[[[[\"}]}", 100) == 3);
  CHECK(json_depth("\"{{{{\"", 100) == 0);
  CHECK(json_depth(std::string(100000, '['), 64) == 65);
  CHECK(json_depth("{\"a\\\"[\": 1}", 10) == 1);
}
