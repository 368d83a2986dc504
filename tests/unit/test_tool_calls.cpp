// test_tool_calls.cpp — the output parser on golden and adversarial text: Hermes, Llama
// 3.1 and Gemma 4 tool calls, <think> and Gemma 4's thought-channel reasoning, every split
// of the text into deltas, and time that stays linear on hostile input.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/util/check.h"

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

// ---- Gemma 4: <|tool_call>call:NAME{key:VALUE}<tool_call|>, <|channel>thought ... <channel|> ----

namespace {

OutputParserOptions gemma4() { return with_tools("gemma4"); }

nlohmann::json args_of(const ToolCall& call) { return nlohmann::json::parse(call.arguments); }

}  // namespace

TEST_CASE("gemma4: reasoning, content and back-to-back calls with every kind of value") {
  // As the template writes them: keys sorted and bare, strings between <|"|>, Python's None.
  std::string text =
      "<|channel>thought\nThe user wants two things.\n<channel|>Let me check.<|tool_call>call:book{budget:1250.5,"
      "city:<|\"|>Zürich<|\"|>,empty:{},flags:[true,false,None,0,-3,0.0025,1e-05],none:[],note:<|\"|>a, b: {c} "
      "[d]\nline \"two\" <tool_call|> inside<|\"|>,prefs:{window:true,deep:{x:[{y:null}]}}}<tool_call|>"
      "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>";
  Parsed p = parse_whole(text, gemma4());
  CHECK(p.reasoning == "The user wants two things.");
  CHECK(p.content == "Let me check.");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "book");
  CHECK(args_of(p.calls[0]) == nlohmann::json::parse(R"({"budget": 1250.5, "city": "Zürich", "empty": {},
      "flags": [true, false, null, 0, -3, 0.0025, 1e-05], "none": [],
      "note": "a, b: {c} [d]\nline \"two\" <tool_call|> inside",
      "prefs": {"window": true, "deep": {"x": [{"y": null}]}}})"));
  CHECK(p.calls[1].name == "get_weather");
  CHECK(p.calls[1].arguments == "{\"city\":\"Oslo\"}");
  CHECK(p.calls[0].id != p.calls[1].id);
  CHECK(p.calls[0].id.rfind("call_", 0) == 0);
  check_all_splits(text, gemma4());
}

TEST_CASE("gemma4: text around calls, and the empty thought channel of a non-thinking turn") {
  std::string text = "<|channel>thought\n<channel|>\n\nSure.\n<|tool_call>call:ping{}<tool_call|>\nDone.";
  Parsed p = parse_whole(text, gemma4());
  CHECK(p.reasoning.empty());
  CHECK(p.content == "Sure.\nDone.");
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == "ping");
  CHECK(p.calls[0].arguments == "{}");
  check_all_splits(text, gemma4());
}

TEST_CASE("gemma4: arguments given as a JSON string read as JSON; quoted keys are accepted") {
  // The template prints a string's arguments between the call's braces as they came.
  Parsed p = parse_whole("<|tool_call>call:f{{\"a\": 1, \"b\": [\"x\"]}}<tool_call|>", gemma4());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0]) == nlohmann::json{{"a", 1}, {"b", {"x"}}});
  p = parse_whole("<|tool_call>call:f{<|\"|>k k<|\"|>:1,\"q\\\"\":\"v\\n\"}<tool_call|>", gemma4());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0]) == nlohmann::json{{"k k", 1}, {"q\"", "v\n"}});
}

TEST_CASE("gemma4: malformed calls stay content, verbatim; an unclosed whole call at the end parses") {
  for (std::string bad : {"<|tool_call>call:f{a:<|\"|>open}<tool_call|>", "<|tool_call>f{a:1}<tool_call|>",
                          "<|tool_call>call:{a:1}<tool_call|>", "<|tool_call>call:f{a:1} extra<tool_call|>",
                          "<|tool_call>call:f{a:1,}<tool_call|>", "<|tool_call>call:f{:1}<tool_call|>",
                          "<|tool_call>call:f{a:[1,2}<tool_call|>", "<|tool_call>call:two words{}<tool_call|>"}) {
    CAPTURE(bad);
    Parsed p = parse_whole(bad, gemma4());
    CHECK(p.calls.empty());
    CHECK(p.content == bad);
    check_all_splits(bad, gemma4());
  }
  Parsed p = parse_whole("<|tool_call>call:f{a:1}", gemma4());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].arguments == "{\"a\":1}");
  p = parse_whole("<|tool_call>call:f{a:", gemma4());
  CHECK(p.calls.empty());
  CHECK(p.content == "<|tool_call>call:f{a:");
  p = parse_whole("so <|tool_ca", gemma4());  // a partial mark is released when the text ends
  CHECK(p.content == "so <|tool_ca");
}

TEST_CASE("gemma4: <turn|> and <|tool_response> end the answer") {
  Parsed p = parse_whole("Hi.<turn|>\n<|turn>user\nfake", gemma4());
  CHECK(p.content == "Hi.");
  p = parse_whole("<|tool_call>call:f{}<tool_call|><|tool_response>response:f{value:<|\"|>made up<|\"|>}", gemma4());
  CHECK(p.calls.size() == 1);
  CHECK(p.content.empty());
  check_all_splits("a<|tool_call>call:f{}<tool_call|><|tool_response>response:f{}<tool_response|>b", gemma4());
}

TEST_CASE("gemma4: without tools a call is content; the thought channel is reasoning either way") {
  OutputParserOptions o;
  o.format = find_chat_format("gemma4");
  const std::string text = "<|channel>thought\nhm\n<channel|>A <|tool_call>call:f{}<tool_call|>";
  Parsed p = parse_whole(text, o);
  CHECK(p.reasoning == "hm");
  CHECK(p.calls.empty());
  CHECK(p.content == "A <|tool_call>call:f{}<tool_call|>");
  check_all_splits(text, o);
}

TEST_CASE("gemma4: hostile text parses in linear time and deep nesting is refused") {
  std::string hostile;
  for (int i = 0; i < 50000; ++i) hostile += "<|tool_ca<|channel>thou<channel|<|\"|{[";
  std::string body = "<|tool_call>call:f{a:" + std::string(1 << 20, '[');
  std::string quotes = "<|tool_call>call:f{";
  for (int i = 0; i < 100000; ++i) quotes += "a:<|\"|>x<|\"|>,";
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string* text : {&hostile, &body, &quotes}) {
    auto parser = make_output_parser(gemma4());
    for (size_t i = 0; i < text->size(); i += 7) parser->push(text->substr(i, 7));
    parser->finish();
    CHECK(parser->num_tool_calls() == 0);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("4.3 MB of hostile Gemma 4 text parsed in " << seconds << " s");
  CHECK(seconds < 5.0);
  std::string deep = "<|tool_call>call:f{a:" + std::string(40, '[') + std::string(40, ']') + "}<tool_call|>";
  CHECK(parse_whole(deep, gemma4()).calls.empty());
  std::string ok = "<|tool_call>call:f{a:" + std::string(20, '[') + std::string(20, ']') + "}<tool_call|>";
  CHECK(parse_whole(ok, gemma4()).calls.size() == 1);
}

namespace {

using OJ = nlohmann::ordered_json;

// Every kind of value the notation writes, and keys the template's dictsort puts out of the
// schema's order ("Unit" before "where", case-insensitively).
const OJ kGemmaTools = OJ::parse(R"([
  {"type": "function", "function": {"name": "plan", "parameters": {"type": "object", "properties": {
    "where": {"type": "object", "properties": {"name": {"type": "string"}, "lat": {"type": "number"}},
              "required": ["name"]},
    "city": {"type": "string"},
    "Unit": {"type": "string", "enum": ["c", "f, \"quoted\" {x}", "x<tool_call|>y", "日本"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "ratio": {"type": "number"},
    "ok": {"type": "boolean"},
    "note": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "odd key": {"type": "integer"},
    "anything": {}},
    "required": ["city", "days", "where"]}}},
  {"type": "function", "function": {"name": "ping"}}
])");

size_t code_points(const std::string& s) {
  return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
}

// The arguments of `plan` against its schema, checked by hand.
void check_plan_arguments(const nlohmann::json& a) {
  REQUIRE(a.is_object());
  const std::set<std::string> declared = {"where", "city", "Unit", "days", "ratio", "ok", "note", "tags", "code", "odd key", "anything"};
  for (const auto& [key, value] : a.items()) CHECK(declared.count(key));
  REQUIRE(a.contains("city"));
  REQUIRE(a.contains("days"));
  REQUIRE(a.contains("where"));
  CHECK(a["city"].is_string());
  CHECK(a["days"].is_number_integer());
  CHECK(a["days"].get<int64_t>() >= 1);
  CHECK(a["days"].get<int64_t>() <= 7);
  CHECK(a["where"].is_object());
  CHECK(a["where"]["name"].is_string());
  if (a["where"].contains("lat")) CHECK(a["where"]["lat"].is_number());
  for (const auto& [key, value] : a["where"].items()) CHECK((key == "name" || key == "lat"));
  if (a.contains("Unit")) {
    const std::set<std::string> units = {"c", "f, \"quoted\" {x}", "x<tool_call|>y", "日本"};
    CHECK((a["Unit"].is_string() && units.count(a["Unit"].get<std::string>())));
  }
  if (a.contains("ratio")) CHECK(a["ratio"].is_number());
  if (a.contains("ok")) CHECK(a["ok"].is_boolean());
  if (a.contains("note")) CHECK((a["note"].is_string() || a["note"].is_null()));
  if (a.contains("tags")) {
    REQUIRE(a["tags"].is_array());
    CHECK(a["tags"].size() <= 3);
    for (const auto& t : a["tags"]) CHECK((t.is_string() && code_points(t.get<std::string>()) <= 5));
  }
  if (a.contains("code")) CHECK((a["code"].is_string() && std::regex_match(a["code"].get<std::string>(), std::regex("[A-Z]{3}"))));
  if (a.contains("odd key")) CHECK(a["odd key"].is_number_integer());
}

std::string lowered(std::string s) {
  for (char& c : s) c = char(std::tolower(uint8_t(c)));
  return s;
}

}  // namespace

TEST_CASE("gemma4: a forced call opens in the prompt, and every call its grammar allows reads back valid") {
  const ChatFormat& f = *find_chat_format("gemma4");
  // Single bytes, and tokens that cross the notation's marks: the delimiter whole and in
  // part, the closing tag, quotes, braces, commas, newlines and multi-byte characters.
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  for (const char* t : {"<|\"|>", "<|\"|", "<|", "\"|>", "<tool_call|>", "}<tool_call|>", "\"", "{", "},", ", ", ":{",
                        "\n", "\\n", "日本", "é", "call:", "<|\"|>,", "true", "null", "-12", "3.5e"})
    bytes.emplace_back(t);
  const auto table = std::make_shared<const constrain::TokenTable>(bytes);
  CHECK(f.auto_trigger(kGemmaTools, table) != nullptr);
  std::mt19937 rng(41);
  std::vector<uint64_t> mask;
  const std::string named = "plan";
  size_t strings_with_marks = 0;
  std::set<std::string> called;
  for (const std::string* name : {static_cast<const std::string*>(nullptr), &named}) {
    const auto call = f.force_call(kGemmaTools, name);
    REQUIRE(call);
    CHECK(call->prefill == (name ? "<|tool_call>call:plan" : "<|tool_call>call:"));
    const auto c = constrain::compile_constraint(call->rest, table);
    for (int walk = 0; walk < 300; ++walk) {
      auto m = c->new_matcher();
      std::string text = call->prefill;
      for (uint32_t left = 300; left > 0 && !(m->accepting() && m->finished()); --left) {
        m->fill_mask(mask, left - 1);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
          if ((mask[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
        if (allowed.empty()) break;
        const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        REQUIRE(m->advance(pick));
        text += table->bytes(pick);
      }
      CAPTURE(text);
      REQUIRE(m->accepting());
      REQUIRE(text.size() > 12);
      CHECK(text.substr(text.size() - 12) == "<tool_call|>");
      Parsed p = parse_whole(text, gemma4());
      CHECK(p.content.empty());
      REQUIRE(p.calls.size() == 1);
      if (name) CHECK(p.calls[0].name == named);
      called.insert(p.calls[0].name);
      if (p.calls[0].name == "ping") {
        CHECK(args_of(p.calls[0]).is_object());
        continue;
      }
      REQUIRE(p.calls[0].name == "plan");
      check_plan_arguments(args_of(p.calls[0]));
      // Keys in the template's order: sorted, case-insensitively.
      std::vector<std::string> keys;
      const OJ written = OJ::parse(p.calls[0].arguments);
      for (const auto& [key, value] : written.items()) keys.push_back(lowered(key));
      CHECK(std::is_sorted(keys.begin(), keys.end()));
      const nlohmann::json args = args_of(p.calls[0]);
      const std::string city = args["city"].get<std::string>();
      strings_with_marks += city.find_first_of("{},:\"\n") != std::string::npos;
      if (walk < 20) check_all_splits(text, gemma4());
    }
  }
  MESSAGE(strings_with_marks << " of 600 calls wrote the notation's punctuation inside a string");
  CHECK(strings_with_marks > 100);
  CHECK(called == std::set<std::string>{"ping", "plan"});
}

// The real Gemma 4 tokenizer holds <|"|> and <tool_call|> as added tokens, which no value
// may hold: the grammar declares them its markers, so a string can close with the token the
// model writes, and where the delimiter or the closing tag is forced, their token is.
TEST_CASE("gemma4: with <|\"|> and <tool_call|> as added tokens, a constrained call closes strings with them") {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  const int32_t quote = int32_t(bytes.size()), close = quote + 1, other = quote + 2;
  bytes.insert(bytes.end(), {"", "", ""});
  // Text encodes byte by byte (the added tokens are not parsed from text, as the
  // constraint's encoder never parses them).
  const constrain::TokenTable::Encoder encode = [](const std::string& text) {
    std::vector<int32_t> ids;
    for (char ch : text) ids.push_back(uint8_t(ch));
    return ids;
  };
  const auto table = std::make_shared<const constrain::TokenTable>(
      bytes, encode,
      std::unordered_map<int32_t, std::string>{{quote, "<|\"|>"}, {close, "<tool_call|>"}, {other, "<turn|>"}});
  const auto call = find_chat_format("gemma4")->force_call(kGemmaTools, nullptr);
  const auto c = constrain::compile_constraint(call->rest, table);
  std::vector<uint64_t> mask;
  auto allowed = [&](constrain::Matcher& m, int32_t t) {
    m.fill_mask(mask);
    return ((mask[size_t(t) / 64] >> (t % 64)) & 1) != 0;
  };
  auto m = c->new_matcher();
  REQUIRE(m->advance_bytes("plan{city:"));
  CHECK(allowed(*m, quote));  // opens the string
  CHECK(!allowed(*m, close));
  CHECK(!allowed(*m, other));
  REQUIRE(m->advance(quote));
  REQUIRE(m->advance_bytes("Oslo"));
  CHECK(allowed(*m, quote));   // closes it, as the model writes it
  CHECK(allowed(*m, 'X'));     // or the text goes on
  CHECK(!allowed(*m, other));  // other added tokens never
  REQUIRE(m->advance(quote));
  CHECK(!m->advance(other));
  // Random calls over this table, as text the way the table prints its tokens: each parses
  // back to one call whose arguments meet the schema.
  std::mt19937 rng(7);
  for (int walk = 0; walk < 100; ++walk) {
    auto w = c->new_matcher();
    std::string text = call->prefill;
    bool used_quote = false, used_close = false;
    for (uint32_t left = 300; left > 0 && !(w->accepting() && w->finished()); --left) {
      w->fill_mask(mask, left - 1);
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
        if ((mask[size_t(t) / 64] >> (t % 64)) & 1) ok.push_back(t);
      REQUIRE(!ok.empty());
      const int32_t pick = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      REQUIRE(w->advance(pick));
      used_quote |= pick == quote;
      used_close |= pick == close;
      text += table->text(pick);
    }
    CAPTURE(text);
    REQUIRE(w->accepting());
    Parsed p = parse_whole(text, gemma4());
    REQUIRE(p.calls.size() == 1);
    CHECK(used_close);  // the closing tag is forced: its own token
    if (p.calls[0].name == "plan") {
      CHECK(used_quote);
      check_plan_arguments(args_of(p.calls[0]));
    }
  }
}

TEST_CASE("gemma4: calls the grammar holds to, written by hand: accepted ones parse, others are refused") {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  const auto table = std::make_shared<const constrain::TokenTable>(bytes);
  const auto call = find_chat_format("gemma4")->force_call(kGemmaTools, nullptr);
  const auto c = constrain::compile_constraint(call->rest, table);
  auto accepts = [&](const std::string& rest) {
    auto m = c->new_matcher();
    return m->advance_bytes(rest) && m->accepting();
  };
  const std::string ok =
      "plan{anything:{k:[1,<|\"|>two<|\"|>,null]},city:<|\"|>a, b: {c} [d]\n\"e\" <tool_call|> é<|\"|>,code:<|\"|>ABC<|\"|>,"
      "days:7,note:null,odd key:-3,ok:false,ratio:-2.5,tags:[<|\"|>日本語<|\"|>],Unit:<|\"|>f, \"quoted\" {x}<|\"|>,"
      "where:{lat:1.5,name:<|\"|><|\"|>}}<tool_call|>";
  CHECK(accepts(ok));
  Parsed p = parse_whole("<|tool_call>call:" + ok, gemma4());
  REQUIRE(p.calls.size() == 1);
  check_plan_arguments(args_of(p.calls[0]));
  CHECK(args_of(p.calls[0])["city"] == "a, b: {c} [d]\n\"e\" <tool_call|> é");
  CHECK(accepts("ping{}<tool_call|>"));
  CHECK(accepts("plan{city:<|\"|>x<|\"|>,days:1,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));
  CHECK(!accepts("plan{days:1,city:<|\"|>x<|\"|>,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));  // out of order
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));          // days missing
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,days:8,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));   // above maximum
  CHECK(!accepts("plan{city:\"x\",days:1,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));           // JSON's quotes
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,days:1,Unit:<|\"|>k<|\"|>,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,code:<|\"|>AB<|\"|>,days:1,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,days:1,tags:[<|\"|>abcdef<|\"|>],where:{name:<|\"|>y<|\"|>}}<tool_call|>"));
  CHECK(!accepts("nope{}<tool_call|>"));
  // Numbers a double holds, as the reader types them: no exponent past 1e15.
  CHECK(!accepts("plan{city:<|\"|>x<|\"|>,days:1,ratio:1e999,where:{name:<|\"|>y<|\"|>}}<tool_call|>"));
}

TEST_CASE("gemma4: names the notation cannot write are refused; hostile schemas are refused as JSON's grammar refuses them") {
  const ChatFormat& f = *find_chat_format("gemma4");
  const auto refusal = [&](const std::string& parameters) {
    try {
      constrain::build_grammar(
          f.force_call(OJ::parse(R"([{"type":"function","function":{"name":"a","parameters":)" + parameters + "}}]"), nullptr)->rest);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THROWS_AS(f.force_call(OJ::parse(R"([{"type":"function","function":{"name":"a{b"}}])"), nullptr), InputError);
  CHECK_THROWS_AS(f.force_call(OJ::parse(R"([{"type":"function","function":{"name":"a b"}}])"), nullptr), InputError);
  CHECK(refusal(R"({"type":"object","properties":{"x":{"type":"string","enum":["a<|\"|>b"]}}})").find("<|\"|>") != std::string::npos);
  CHECK(refusal(R"({"type":"object","properties":{"x":{"not":{}}}})").find("unsupported keyword 'not'") != std::string::npos);
  CHECK(refusal(R"({"type":"object","patternProperties":{}})").find("patternProperties") != std::string::npos);
  CHECK(refusal(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("$ref") != std::string::npos);
  CHECK(refusal(R"({"type":"object","properties":{"x":{"type":"string","format":"hostname"}}})").find("hostname") != std::string::npos);
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"({"type":"object","properties":{"a":)";
  deep += "{}" + std::string(400, '}');
  CHECK(refusal(deep).find("deeper") != std::string::npos);
  OJ big = {{"type", "object"}, {"properties", {{"x", {{"enum", OJ::array()}}}}}};
  for (int i = 0; i < 100000; ++i) big["properties"]["x"]["enum"].push_back("value-" + std::to_string(i));
  CHECK(refusal(big.dump()).find("too large") != std::string::npos);
  CHECK(refusal(R"({"type":"object","properties":{"x":{"type":"string","maxLength":2,"minLength":3}}})").find("maxLength") != std::string::npos);
}
