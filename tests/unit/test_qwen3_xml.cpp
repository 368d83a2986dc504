// test_qwen3_xml.cpp — the Qwen3-Coder / Qwen3.5 / Qwen3.6 XML tool-call format: detection
// from the template (the real Qwen3-Coder one among them), calls read into OpenAI's form with
// each value typed by its declared schema, forced calls held to their grammar, every split
// into deltas, reasoning first, malformed and unterminated calls kept as text, linear time on
// hostile text, and a call the model's own template renders read back as the same call.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/template/chat_template.h"
#include "engine/util/check.h"
#include "tests/unit/fixture_files.h"
#include "tests/unit/output_events.h"
#include "web/chat_format/chat_format.h"
#include "web/chat_format/think.h"

using namespace spark;
using namespace spark::testing;
using J = nlohmann::ordered_json;

namespace {

const J kTools = J::parse(R"([
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"},
    "ratio": {"type": "number"}, "overwrite": {"type": "boolean"}, "meta": {"type": "object"},
    "tags": {"type": "array", "items": {"type": "string"}}, "limit": {"type": ["integer", "null"]},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "label": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "list_dir", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}}}}}
])");

OutputParserOptions qwen() {
  OutputParserOptions o = with_tools("qwen3_xml");
  o.tool_list = kTools;
  return o;
}

// A call as the format writes it, one parameter per (key, value).
std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [key, value] : params) s += "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

nlohmann::json args_of(const ToolCall& call) { return nlohmann::json::parse(call.arguments); }

const char* detected(const std::string& with_tools) { return detect_chat_format(TemplateText{with_tools, ""}).name(); }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "fixture missing: " << path << " " << fixtures_hint());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("qwen3_xml: detected from <function= and <parameter= before Hermes' <tool_call>") {
  CHECK(std::string(detected("{{ '<tool_call>\\n<function=' + n + '>\\n<parameter=' + k }}")) == "qwen3_xml");
  CHECK(std::string(detected("{{ '<function=' }}")) == "hermes");  // half the marks is not the format
  CHECK(std::string(detected("{{ '<tool_call>' }}")) == "hermes");
  CHECK(std::string(detected("<|channel|> <|message|> <function= <parameter=")) == "harmony");

  const std::string coder = read_file(fixtures_dir() + "/templates/qwen3_coder/chat_template.jinja");
  CHECK(std::string(detect_chat_format(TemplateText{coder, coder}).name()) == "qwen3_xml");
  CHECK(!template_thinks(TemplateText{coder, coder}));
}

TEST_CASE("qwen3_xml: a forced call opens in the prompt, and every call its grammar allows reads back typed as declared") {
  const ChatFormat& f = *find_chat_format("qwen3_xml");
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  const auto table = std::make_shared<const constrain::TokenTable>(bytes);
  CHECK(f.auto_trigger(kTools, table) != nullptr);
  CHECK(!f.reads_special_tokens());
  std::mt19937 rng(37);
  std::vector<uint64_t> mask;
  const std::string named = "list_dir";
  for (const std::string* name : {static_cast<const std::string*>(nullptr), &named}) {
    const auto call = f.force_call(kTools, name);
    REQUIRE(call);
    CHECK(call->prefill == (name ? "<tool_call>\n<function=list_dir>\n" : "<tool_call>\n<function="));
    const auto c = constrain::compile_constraint(call->rest, table);
    for (int walk = 0; walk < 200; ++walk) {
      auto m = c->new_matcher();
      std::string text = call->prefill;
      for (uint32_t left = 600; left > 0 && !(m->accepting() && m->finished()); --left) {
        m->fill_mask(mask, left - 1);
        std::vector<int32_t> allowed;
        for (int b = 0; b < 256; ++b)
          if ((mask[size_t(b) / 64] >> (b % 64)) & 1) allowed.push_back(b);
        if (allowed.empty()) break;
        const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        REQUIRE(m->advance(pick));
        text += char(pick);
      }
      CAPTURE(text);
      REQUIRE(m->accepting());
      Parsed p = parse_whole(text, qwen());
      CHECK(p.content.empty());
      REQUIRE(p.calls.size() == 1);
      if (name) CHECK(p.calls[0].name == named);
      const nlohmann::json args = args_of(p.calls[0]);
      for (const auto& [key, value] : args.items()) {
        CAPTURE(key);
        if (key == "mode") CHECK(value.is_number_integer());
        else if (key == "ratio") CHECK(value.is_number());
        else if (key == "overwrite") CHECK(value.is_boolean());
        else if (key == "meta") CHECK(value.is_object());
        else if (key == "tags") CHECK(value.is_array());
        else if (key == "limit") CHECK((value.is_number_integer() || value.is_null()));
        else if (key == "note") CHECK((value.is_string() || value.is_null()));
        else CHECK(value.is_string());
      }
    }
  }
}

TEST_CASE("qwen3_xml: names the format cannot write, and enums bare text cannot tell apart, are refused") {
  const ChatFormat& f = *find_chat_format("qwen3_xml");
  const auto refusal = [&](const char* tools) {
    try {
      constrain::build_grammar(f.force_call(J::parse(tools), nullptr)->rest);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal(R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x>y":{"type":"string"}}}}}])")
            .find("'x>y'") != std::string::npos);
  CHECK(refusal(R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x":{"type":"string","enum":["1",1]}}}}}])")
            .find("'x'") != std::string::npos);
  CHECK_THROWS_AS(f.force_call(J::parse(R"([{"type":"function","function":{"name":"a>b"}}])"), nullptr), InputError);
}

TEST_CASE("qwen3_xml: one call becomes a name and a JSON object of typed arguments") {
  const std::string text = xml_call("write_file", {{"path", "/tmp/a.txt"}, {"mode", "420"}, {"overwrite", "true"}});
  Parsed p = parse_whole(text, qwen());
  CHECK(p.content.empty());
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == "write_file");
  CHECK(p.calls[0].id.rfind("call_", 0) == 0);
  CHECK(p.calls[0].arguments == R"({"path":"/tmp/a.txt","mode":420,"overwrite":true})");
  check_all_splits(text, qwen());
}

TEST_CASE("qwen3_xml: text before, several calls (also two functions in one block), text between") {
  const std::string text = "I will look first.\n" + xml_call("list_dir", {{"path", "/src"}}) + "\n" +
                           xml_call("write_file", {{"path", "b"}}) + "\nthen\n" +
                           "<tool_call>\n<function=list_dir>\n<parameter=path>\nx\n</parameter>\n</function>\n"
                           "<function=list_dir>\n</function>\n</tool_call>";
  Parsed p = parse_whole(text, qwen());
  CHECK(p.content == "I will look first.\nthen\n");
  REQUIRE(p.calls.size() == 4);
  CHECK(p.calls[0].name == "list_dir");
  CHECK(args_of(p.calls[0]) == nlohmann::json{{"path", "/src"}});
  CHECK(p.calls[1].name == "write_file");
  CHECK(args_of(p.calls[2]) == nlohmann::json{{"path", "x"}});
  CHECK(p.calls[3].arguments == "{}");
  CHECK(p.calls[0].id != p.calls[1].id);
  check_all_splits(text, qwen());
}

TEST_CASE("qwen3_xml: values are typed by the declared schema, and stay strings when they do not fit") {
  auto arg = [](const std::string& key, const std::string& value, const char* fn = "write_file") {
    Parsed p = parse_whole(xml_call(fn, {{key, value}}), qwen());
    REQUIRE(p.calls.size() == 1);
    return args_of(p.calls[0])[key];
  };
  CHECK(arg("mode", "42") == 42);
  CHECK(arg("mode", " 7 ") == 7);
  CHECK(arg("mode", "4.5") == "4.5");
  CHECK(arg("mode", "seven") == "seven");
  CHECK(arg("ratio", "2.5") == 2.5);
  CHECK(arg("ratio", "3") == 3);
  CHECK(arg("ratio", "1e400x") == "1e400x");
  CHECK(arg("overwrite", "True") == true);  // Python's spelling, as the templates print it
  CHECK(arg("overwrite", "false") == false);
  CHECK(arg("overwrite", "maybe") == "maybe");
  CHECK(arg("meta", "{\"a\": [1, 2], \"b\": null}") == nlohmann::json{{"a", {1, 2}}, {"b", nullptr}});
  CHECK(arg("meta", "{'a': 1}") == "{'a': 1}");
  CHECK(arg("meta", "[1]") == "[1]");
  CHECK(arg("tags", "[\"x\", \"y\"]") == nlohmann::json{"x", "y"});
  CHECK(arg("tags", "x, y") == "x, y");
  CHECK(arg("tags", std::string(100, '[') + std::string(100, ']')) == std::string(100, '[') + std::string(100, ']'));
  CHECK(arg("limit", "None").is_null());
  CHECK(arg("limit", "12") == 12);
  CHECK(arg("mode", "null").is_null());
  CHECK(arg("note", "null").is_null());
  CHECK(arg("note", "some note") == "some note");
  CHECK(arg("label", "null") == "null");  // a plain string stays what was written
  CHECK(arg("path", "42") == "42");
  CHECK(arg("undeclared", "42") == "42");

  OutputParserOptions unknown_tools = qwen();
  unknown_tools.tool_list = nullptr;  // no schemas: every value is a string
  Parsed p = parse_whole(xml_call("write_file", {{"mode", "42"}}), unknown_tools);
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].arguments == R"({"mode":"42"})");
}

TEST_CASE("qwen3_xml: a string keeps its inner newlines and < characters; one newline each side is the format's") {
  const std::string code = "if (a < b) {\n  s = \"<div>\";\n}\n</parameter> is fine here\n<parameter=x> too";
  Parsed p = parse_whole(xml_call("write_file", {{"content", code}, {"path", "p"}}), qwen());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0])["content"] == code);
  CHECK(args_of(p.calls[0])["path"] == "p");

  p = parse_whole(xml_call("write_file", {{"content", "\nblank lines around\n"}}), qwen());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0])["content"] == "\nblank lines around\n");

  // Written without the newlines, the value is taken as it stands.
  p = parse_whole("<tool_call><function=list_dir><parameter=path>/a b</parameter></function></tool_call>", qwen());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0])["path"] == "/a b");
  check_all_splits(xml_call("write_file", {{"content", code}}), qwen());
}

TEST_CASE("qwen3_xml: reasoning before the call, with the prompt opening <think> or not") {
  OutputParserOptions o = qwen();
  o.reasoning = true;
  const std::string text = "<think>\nThe user wants a listing.\n</think>\n\nListing.\n" + xml_call("list_dir", {{"path", "."}});
  Parsed p = parse_whole(text, o);
  CHECK(p.reasoning == "\nThe user wants a listing.\n");
  CHECK(p.content == "Listing.\n");
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0]) == nlohmann::json{{"path", "."}});
  check_all_splits(text, o);

  o.starts_in_reasoning = true;
  p = parse_whole("hm, <tool_call> is not a call here</think>\n" + xml_call("list_dir", {}), o);
  CHECK(p.reasoning == "hm, <tool_call> is not a call here");
  CHECK(p.content.empty());
  CHECK(p.calls.size() == 1);
}

TEST_CASE("qwen3_xml: malformed calls stay content, verbatim; without tools every tag is content") {
  for (std::string bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                          "<tool_call>\n<function=f>\n<parameter=a>\nx\n</tool_call>",
                          "<tool_call>\n<function=>\n</function>\n</tool_call>",
                          "<tool_call>\n<function=f\n</function>\n</tool_call>",
                          "<tool_call>\n<function=f>\nstray text\n</function>\n</tool_call>",
                          "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>",
                          "<tool_call></tool_call>"}) {
    CAPTURE(bad);
    Parsed p = parse_whole(bad, qwen());
    CHECK(p.calls.empty());
    CHECK(p.content == bad);
  }
  OutputParserOptions no_tools;
  no_tools.format = find_chat_format("qwen3_xml");
  const std::string call = xml_call("list_dir", {{"path", "."}});
  CHECK(parse_whole(call, no_tools).content == call);
}

TEST_CASE("qwen3_xml: a call cut off at the end is content unless its function closed (as Hermes)") {
  const std::string cut = "Sure.\n<tool_call>\n<function=write_file>\n<parameter=content>\nhalf a fi";
  Parsed p = parse_whole(cut, qwen());
  CHECK(p.calls.empty());
  CHECK(p.content == cut);
  check_all_splits(cut, qwen());

  p = parse_whole("<tool_call>\n<function=list_dir>\n<parameter=path>\n/\n</parameter>\n</function>\n", qwen());
  REQUIRE(p.calls.size() == 1);
  CHECK(args_of(p.calls[0]) == nlohmann::json{{"path", "/"}});

  p = parse_whole("a <tool_ca", qwen());
  CHECK(p.content == "a <tool_ca");
}

TEST_CASE("qwen3_xml: 1 MB of hostile text parses in linear time") {
  std::string tags;
  for (int i = 0; i < 30000; ++i) tags += "<tool_ca<function=<parameter=x></parameter>";
  // One closed body full of closing tags that never end a value, then one left open.
  std::string body = "<tool_call>\n<function=write_file>\n<parameter=content>\n";
  for (int i = 0; i < 40000; ++i) body += "</parameter>   x";
  body += "</tool_call><tool_call>\n<function=f>\n<parameter=a>\n" + std::string(1 << 19, '<');
  OutputParserOptions o = qwen();
  o.reasoning = true;
  auto t0 = std::chrono::steady_clock::now();
  auto parser = make_output_parser(o);
  Parsed p;
  for (size_t i = 0; i < tags.size(); i += 7) p = collect(parser->push(tags.substr(i, 7)), std::move(p));
  for (size_t i = 0; i < body.size(); i += 4096) p = collect(parser->push(body.substr(i, 4096)), std::move(p));
  p = collect(parser->finish(), std::move(p));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double megabytes = double(tags.size() + body.size()) / 1e6;
  MESSAGE(megabytes << " MB of hostile text parsed in " << seconds << " s");
  CHECK(seconds < 5.0);  // quadratic behaviour would take minutes
  CHECK(p.calls.empty());
  CHECK(p.content == tags + body);  // nothing the model wrote is lost
}

namespace {

// Arguments as the request reader hands them to templates: objects (openai_request.cpp),
// every JSON type among them.
const J kWriteArgs = J::parse(R"({"path": "src/main.py", "content": "def f(a, b):\n    return a < b\n",
                                  "mode": 420, "ratio": 0.5, "overwrite": true, "meta": {"k": [1, "two"]},
                                  "tags": ["x", "y"], "limit": null})");
const J kListArgs = J::parse(R"({"path": "src"})");

// A user message, then `assistant` (its text fields) calling write_file and list_dir.
J conversation_with_calls(J assistant) {
  assistant["role"] = "assistant";
  assistant["tool_calls"] = J::array({J{{"id", "call_1"}, {"type", "function"},
                                        {"function", {{"name", "write_file"}, {"arguments", kWriteArgs}}}},
                                      J{{"id", "call_2"}, {"type", "function"},
                                        {"function", {{"name", "list_dir"}, {"arguments", kListArgs}}}}});
  return J::array({J{{"role", "user"}, {"content", "Write it, then list."}}, assistant});
}

// The text of the last turn opened by `open` in a rendered prompt, up to its <|im_end|>.
std::string last_turn(const std::string& prompt, const std::string& open) {
  const size_t start = prompt.rfind(open);
  REQUIRE(start != std::string::npos);
  const size_t end = prompt.find("<|im_end|>", start);
  REQUIRE(end != std::string::npos);
  return prompt.substr(start + open.size(), end - start - open.size());
}

// The two calls read back, split at every delta size as whole.
void check_calls(const std::string& answer, const OutputParserOptions& options, const Parsed& p) {
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "write_file");
  CHECK(args_of(p.calls[0]) == nlohmann::json(kWriteArgs));
  CHECK(p.calls[1].name == "list_dir");
  CHECK(args_of(p.calls[1]) == nlohmann::json(kListArgs));
  check_all_splits(answer, options);
}

}  // namespace

TEST_CASE("qwen3_xml: a call rendered by Qwen3-Coder's own template reads back as the same call") {
  const std::string source = read_file(fixtures_dir() + "/templates/qwen3_coder/chat_template.jinja");
  ChatTemplate tmpl = ChatTemplate::from_source(source, "", "<|im_end|>");
  const J messages = conversation_with_calls({{"content", "Writing the file."}});
  const std::string answer = last_turn(tmpl.render(messages, kTools, false), "<|im_start|>assistant");
  CAPTURE(answer);

  Parsed p = parse_whole(answer, qwen());
  CHECK(p.content == "\nWriting the file.\n\n");
  check_calls(answer, qwen(), p);
}

TEST_CASE("qwen3_xml: calls rendered by Qwen3.5's own template (thinking, Python-style scalars) read back as the same calls") {
  const std::string source = read_file(fixtures_dir() + "/templates/qwen3_5/chat_template.jinja");
  CHECK(std::string(detect_chat_format(TemplateText{source, source}).name()) == "qwen3_xml");
  ChatTemplate tmpl = ChatTemplate::from_source(source, "", "<|im_end|>");
  J messages = conversation_with_calls({{"content", "Writing the file."}, {"reasoning_content", "The user wants a file."}});
  messages.push_back({{"role", "tool"}, {"content", "ok"}, {"tool_call_id", "call_1"}});
  const std::string answer = last_turn(tmpl.render(messages, kTools, false), "<|im_start|>assistant\n");
  CAPTURE(answer);
  // The template writes scalars as Python prints them (True, None): the declared types read them.
  CHECK(answer.find("<parameter=overwrite>\nTrue\n") != std::string::npos);
  CHECK(answer.find("<parameter=limit>\nNone\n") != std::string::npos);

  OutputParserOptions thinking = qwen();
  thinking.reasoning = true;
  Parsed p = parse_whole(answer, thinking);
  CHECK(p.reasoning == "\nThe user wants a file.\n");  // as written between the tags
  CHECK(p.content == "Writing the file.\n\n");
  check_calls(answer, thinking, p);
}
