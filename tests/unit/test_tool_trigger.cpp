// test_tool_trigger.cpp — tool calls under tool_choice "auto": where each chat format's
// call opens (Hermes tags, also split across tokens or as an added token; a Llama 3.1
// answer opening with `{`; a harmony header's recipient), that the rest of the call then
// admits only declared names and schema-valid arguments, and that the output is free
// again after the call.
#include <doctest/doctest.h>

#include <string>

#include "engine/constrain/constraint.h"
#include "engine/constrain/tool_trigger.h"

using namespace spark::constrain;

namespace {

constexpr int32_t kToolCallToken = 256;  // an added token whose text is <tool_call>
constexpr int32_t kMessageToken = 257;   // harmony's <|message|>
constexpr int32_t kChannelToken = 258;   // harmony's <|channel|>
constexpr int32_t kGtNewline = 259;      // ">\n", a merge across the opening's end
constexpr int32_t kGtX = 260;            // ">x", one that leaves the call's grammar

const char* kWeather = R"({"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false})";

std::shared_ptr<const TokenTable> table() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  bytes.insert(bytes.end(), {"", "", "", ">\n", ">x"});
  return std::make_shared<const TokenTable>(
      bytes, TokenTable::Encoder{},
      std::unordered_map<int32_t, std::string>{{kToolCallToken, "<tool_call>"}, {kMessageToken, "<|message|>"}, {kChannelToken, "<|channel|>"}});
}

// The rest of a Hermes or Llama call after its opening, as web/structured_output.cpp builds it.
std::shared_ptr<const Constraint> call(const std::shared_ptr<const TokenTable>& t, bool hermes) {
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::TOOL_CALL;
  s.closing = hermes ? "}\n</tool_call>" : "}";
  const std::string before = hermes ? "\n{\"name\": \"" : "\"name\": \"";
  const std::string key = hermes ? "\", \"arguments\": " : "\", \"parameters\": ";
  s.tools = {{before + "get_weather" + key, kWeather}, {before + "now" + key, R"({"type":"object","properties":{}})"}};
  return compile_constraint(s, t);
}

struct Run {
  ToolCallWatch watch;
  std::shared_ptr<Matcher> active;
  // Samples `token` as the engine would: a live matcher must allow it and steps by it.
  bool token(int32_t id) {
    if (active && !active->advance(id)) return false;
    watch.observe(id, active);
    return true;
  }
  bool text(const std::string& s) {
    for (char c : s)
      if (!token(int32_t(uint8_t(c)))) return false;
    return true;
  }
};

std::shared_ptr<const ToolTrigger> trigger(ToolTrigger::Format format, const std::string& opening) {
  auto t = table();
  auto tr = std::make_shared<ToolTrigger>();
  tr->format = format;
  tr->opening = opening;
  tr->tokens = t;
  if (format == ToolTrigger::Format::HEADER) {
    tr->header_end = "<|message|>";
    ConstraintSpec s;
    s.kind = ConstraintSpec::Kind::JSON_SCHEMA;
    s.schema = kWeather;
    tr->arguments.emplace_back("get_weather", compile_constraint(s, t));
  } else {
    tr->call = call(t, format == ToolTrigger::Format::TAG);
  }
  return tr;
}

}  // namespace

TEST_CASE("a Hermes call is constrained from <tool_call> to </tool_call>, then the text is free") {
  Run r{ToolCallWatch(trigger(ToolTrigger::Format::TAG, "<tool_call>")), nullptr};
  CHECK(r.text("Let me check: <tool_call"));
  CHECK(r.active == nullptr);  // free text, half an opening included
  CHECK(r.token(kGtNewline));   // the opening ends inside a token: its "\n" is the call's
  REQUIRE(r.active != nullptr);
  // What the call admits, each checked on a copy of its matcher:
  CHECK_FALSE(Matcher(*r.active).advance_bytes("{\"name\": \"get_time"));  // no such function
  CHECK_FALSE(Matcher(*r.active).advance_bytes("{\"name\": \"now\", \"arguments\": {\"city\""));  // not its parameter
  CHECK_FALSE(Matcher(*r.active).advance_bytes("{\"name\": \"get_weather\", \"arguments\": {\"town\""));
  CHECK_FALSE(Matcher(*r.active).advance_bytes("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome of the Caesars\""));
  CHECK(r.text("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call"));
  CHECK(r.active != nullptr);
  CHECK(r.text(">"));
  CHECK(r.active == nullptr);  // closed: free again
  CHECK(r.text(" done. {\"name\": 1} </tool_call>"));
  // A second call is constrained again; the added token opens it too.
  CHECK(r.token(kToolCallToken));
  REQUIRE(r.active != nullptr);
  CHECK_FALSE(r.text("{"));  // the call starts with "\n"
  CHECK(r.text("\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  CHECK(r.active == nullptr);
}

TEST_CASE("a token that leaves the call's grammar right after the opening leaves the text free") {
  Run r{ToolCallWatch(trigger(ToolTrigger::Format::TAG, "<tool_call>")), nullptr};
  CHECK(r.text("<tool_call"));
  CHECK(r.token(kGtX));
  CHECK(r.active == nullptr);
}

TEST_CASE("a Llama 3.1 call opens only as the answer's first bytes") {
  Run r{ToolCallWatch(trigger(ToolTrigger::Format::LEADING, "{")), nullptr};
  CHECK(r.text(" \n{"));
  REQUIRE(r.active != nullptr);
  CHECK_FALSE(Matcher(*r.active).advance_bytes("\"name\": \"nope"));
  CHECK(r.text("\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}"));
  CHECK(r.active == nullptr);

  Run prose{ToolCallWatch(trigger(ToolTrigger::Format::LEADING, "{")), nullptr};
  CHECK(prose.text("Sure: {"));
  CHECK(prose.active == nullptr);
}

TEST_CASE("a harmony message to a declared function is its arguments; other recipients are free") {
  Run r{ToolCallWatch(trigger(ToolTrigger::Format::HEADER, "to=functions.")), nullptr};
  CHECK(r.token(kChannelToken));
  CHECK(r.text("commentary to=functions.get_weather json"));
  CHECK(r.active == nullptr);
  CHECK(r.token(kMessageToken));
  REQUIRE(r.active != nullptr);
  CHECK_FALSE(Matcher(*r.active).advance_bytes("{\"town\""));
  CHECK(r.text("{\"city\":\"Rome\"}"));
  CHECK(r.active == nullptr);

  // The recipient before <|channel|>, with no space after it.
  Run before{ToolCallWatch(trigger(ToolTrigger::Format::HEADER, "to=functions.")), nullptr};
  CHECK(before.text("assistant to=functions.get_weather"));
  CHECK(before.token(kChannelToken));
  CHECK(before.text("commentary json"));
  CHECK(before.token(kMessageToken));
  CHECK(before.active != nullptr);

  Run other{ToolCallWatch(trigger(ToolTrigger::Format::HEADER, "to=functions.")), nullptr};
  CHECK(other.text("commentary to=functions.get_weatherly "));
  CHECK(other.token(kMessageToken));
  CHECK(other.active == nullptr);
  CHECK(other.token(kChannelToken));  // and a plain message has no recipient at all
  CHECK(other.text("final"));
  CHECK(other.token(kMessageToken));
  CHECK(other.active == nullptr);
}
