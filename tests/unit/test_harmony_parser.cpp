// test_harmony_parser.cpp — the harmony output parser against openai-harmony's
// StreamableParser (tests/golden/harmony/parser.json, tests/gen/gen_harmony_golden.py),
// whole and streamed in pieces that split special tokens and UTF-8 characters.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "web/chat_format/chat_format.h"

using namespace spark;

namespace {

struct Split {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;
};

std::unique_ptr<OutputParser> harmony_parser() { return make_output_parser({find_chat_format("harmony")}); }

Split parse_in_pieces(const std::string& text, size_t piece) {
  auto parser = harmony_parser();
  OutputParser& p = *parser;
  Split s;
  auto take = [&](const std::vector<OutputEvent>& events) {
    for (const auto& e : events) {
      if (e.kind == OutputEvent::REASONING) s.reasoning += e.text;
      else if (e.kind == OutputEvent::CONTENT) s.content += e.text;
      else s.calls.push_back({e.call.name, e.call.arguments});
    }
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.push(std::string_view(text).substr(i, piece)));
  take(p.finish());
  return s;
}

}  // namespace

TEST_CASE("harmony parser: splits completions as openai-harmony's StreamableParser does") {
  std::ifstream f("tests/golden/harmony/parser.json");
  REQUIRE(f.good());
  const auto golden = nlohmann::json::parse(f);
  REQUIRE(golden["cases"].size() >= 30);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["completion"];
    CAPTURE(text);
    for (size_t piece : {text.size() + 1, size_t{1}, size_t{3}, size_t{7}}) {
      CAPTURE(piece);
      const Split s = parse_in_pieces(text, piece);
      CHECK(s.reasoning == c["expected"]["reasoning"].get<std::string>());
      CHECK(s.content == c["expected"]["content"].get<std::string>());
      std::vector<std::pair<std::string, std::string>> want;
      for (const auto& call : c["expected"]["tool_calls"]) want.push_back({call["name"], call["arguments"]});
      CHECK(s.calls == want);
    }
    ++checked;
  }
  MESSAGE(checked << " completions checked");
}

TEST_CASE("harmony parser: reasoning streams before the message ends; a call comes whole with an id") {
  auto parser = harmony_parser();
  OutputParser& p = *parser;
  auto e = p.push("<|channel|>analysis<|message|>Let me think");
  REQUIRE(e.size() == 1);
  CHECK(e[0].kind == OutputEvent::REASONING);
  CHECK(e[0].text == "Let me think");
  e = p.push("<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":");
  CHECK(e.empty());
  e = p.push("\"Oslo\"}<|call|>");
  REQUIRE(e.size() == 1);
  CHECK(e[0].kind == OutputEvent::TOOL_CALL);
  CHECK(e[0].call.name == "get_weather");
  CHECK(e[0].call.arguments == "{\"city\":\"Oslo\"}");
  CHECK(e[0].call.id.rfind("call_", 0) == 0);
  CHECK(p.finish().empty());
}
