// test_chat_template.cpp — ChatTemplate against renders made by transformers
// (tests/golden/templates/<model>.json), and how templates and special tokens are found.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/template/chat_template.h"
#include "tests/unit/fixture_files.h"
#include "tests/unit/temp_dir.h"

namespace fs = std::filesystem;
using spark::ChatTemplate;
using spark::InputError;
using spark::TemplateError;
using ojson = nlohmann::ordered_json;

namespace {

// A model folder (tokenizers/<name>) in the plain copy of tests/fixtures.
std::string fixture_folder(const std::string& rel) {
  std::string dir = spark::testing::fixtures_dir() + "/" + rel;
  REQUIRE_MESSAGE(fs::exists(dir + "/tokenizer_config.json"),
                  "fixture missing: " << dir << " " << spark::testing::fixtures_hint());
  return dir;
}

ojson read_json_file(const fs::path& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ojson::parse(ss.str());
}

ChatTemplate template_for(const ojson& source) {
  std::string kind = source["kind"].get<std::string>();
  if (kind == "fixture") return ChatTemplate::from_model(fixture_folder(source["path"].get<std::string>()));
  if (kind == "gguf") {
    std::string path = source["path"].get<std::string>();
    REQUIRE_MESSAGE(fs::exists(path), path << " is missing: run `make model` first");
    return ChatTemplate::from_model(path);
  }
  return ChatTemplate::from_source(source["template"].get<std::string>(), source.value("bos_token", ""),
                                   source.value("eos_token", ""));
}

// The request split as `sparkd template` splits it.
std::string render_request(const ChatTemplate& t, const ojson& request) {
  ojson kwargs = ojson::object();
  for (const auto& [k, v] : request.items())
    if (k != "messages" && k != "tools" && k != "add_generation_prompt") kwargs[k] = v;
  ojson tools = request.contains("tools") ? request["tools"] : ojson();
  return t.render(request["messages"], tools, request.value("add_generation_prompt", false), kwargs);
}

void check_golden(const std::string& name) {
  ojson golden = read_json_file("tests/golden/templates/" + name + ".json");
  ChatTemplate t = template_for(golden["source"]);
  int same = 0, refused = 0, index = 0;
  for (const auto& c : golden["cases"]) {
    CAPTURE(index);
    ++index;
    if (c.contains("expected")) {
      try {
        std::string got = render_request(t, c["request"]);
        CHECK(got == c["expected"].get<std::string>());
        same += got == c["expected"].get<std::string>();
      } catch (const std::exception& e) {
        FAIL_CHECK("case " << index << " threw: " << e.what());
      }
    } else {
      CAPTURE(c["error"].get<std::string>());
      CHECK_THROWS_AS(render_request(t, c["request"]), InputError);
      ++refused;
    }
  }
  MESSAGE(name << ": " << same << " renders identical to transformers, " << refused << " refused as the reference does");
  CHECK(same >= 30);
}

using spark::testing::TempDir;

const ojson kHello = ojson::parse(R"([{"role": "user", "content": "hi"}])");

}  // namespace

TEST_CASE("chat template golden: qwen3 (transformers apply_chat_template)") { check_golden("qwen3"); }
TEST_CASE("chat template golden: llama3_1") { check_golden("llama3_1"); }
TEST_CASE("chat template golden: gemma3") { check_golden("gemma3"); }
TEST_CASE("chat template golden: SmolLM2 GGUF") { check_golden("smollm2_gguf"); }
TEST_CASE("chat template golden: harmony-style tools template") { check_golden("harmony_style"); }
TEST_CASE("chat template golden: llama-3.1-style tools template") { check_golden("llama_tools_style"); }
TEST_CASE("chat template golden: mistral-style template") { check_golden("mistral_style"); }
TEST_CASE("chat template golden: llama-2-style template") { check_golden("llama2_style"); }
TEST_CASE("chat template golden: hermes-style template") { check_golden("hermes_style"); }

TEST_CASE("chat template: special tokens come from tokenizer_config.json") {
  ChatTemplate t = ChatTemplate::from_model(fixture_folder("tokenizers/gemma3"));
  CHECK(t.special_tokens()["bos_token"] == "<bos>");
  CHECK(t.special_tokens()["eos_token"] == "<end_of_turn>");
  CHECK(t.special_tokens()["boi_token"] == "<start_of_image>");
  ChatTemplate q = ChatTemplate::from_model(fixture_folder("tokenizers/qwen3"));
  CHECK_FALSE(q.special_tokens().contains("bos_token"));  // null in the config: not passed
  CHECK(q.special_tokens()["pad_token"] == "<|endoftext|>");
}

TEST_CASE("chat template: where the template is found") {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>",
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}"},
                      {"name": "tool_use", "template": "T{{ tools | length }}"}]})");
  ChatTemplate named = ChatTemplate::from_model(dir.path.string());
  CHECK(named.render(kHello, ojson(), false) == "D<s>hi");
  CHECK(named.render(kHello, ojson::array({ojson::object()}), false) == "T1");
  CHECK(named.render(kHello, ojson::array(), false) == "T0");  // an empty list still selects tool_use

  dir.write("chat_template.jinja", "J{{ eos_token }}\n");
  CHECK(ChatTemplate::from_model(dir.path.string()).render(kHello, ojson(), false) == "J</s>");

  dir.write("override.jinja", "O{{ messages | length }}");
  CHECK(ChatTemplate::from_model(dir.path.string(), (dir.path / "override.jinja").string()).render(kHello, ojson(), true) ==
        "O1");
}

TEST_CASE("chat template: missing or broken templates are input errors") {
  TempDir dir;
  CHECK_THROWS_AS(ChatTemplate::from_model((dir.path / "nope").string()), InputError);
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  CHECK_THROWS_AS(ChatTemplate::from_model(dir.path.string()), InputError);
  dir.write("tokenizer_config.json", R"({"chat_template": "{% for m in messages %}"})");
  CHECK_THROWS_AS(ChatTemplate::from_model(dir.path.string()), TemplateError);
  dir.write("tokenizer_config.json", R"({"chat_template": 7})");
  CHECK_THROWS_AS(ChatTemplate::from_model(dir.path.string()), InputError);
}

TEST_CASE("chat template: messages are normalized as transformers does") {
  ChatTemplate t = ChatTemplate::from_source(
      "{% for m in messages %}{{ m | tojson }}{% endfor %}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ x }}",
      "<s>", "</s>");
  ojson messages = ojson::parse(
      R"([{"role": "assistant", "content": "a", "tool_calls": null, "reasoning": "r"}, {"role": "user", "content": null}])");
  CHECK(t.render(messages, ojson(), true, ojson{{"x", 1.0}}) ==
        R"({"thinking": "r", "role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "r"}{"role": "user"}|None|None|True|1.0)");
  CHECK_THROWS_AS(t.render(ojson::array(), ojson(), false), InputError);
  CHECK_THROWS_AS(t.render(ojson::parse(R"(["not an object"])"), ojson(), false), InputError);
  CHECK_THROWS_AS(t.render(kHello, ojson(), false, ojson{{"messages", 1}}), InputError);
}

TEST_CASE("chat template: raise_exception becomes a TemplateError naming the message") {
  ChatTemplate t = ChatTemplate::from_model(fixture_folder("tokenizers/gemma3"));
  try {
    t.render(ojson::parse(R"([{"role": "assistant", "content": "first"}])"), ojson(), true);
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("Conversation roles must alternate") != std::string::npos);
  }
}

TEST_CASE("chat template: nlohmann::json overload renders the same") {
  ChatTemplate t = ChatTemplate::from_model(fixture_folder("tokenizers/qwen3"));
  nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  CHECK(t.render(messages, nlohmann::json(), true) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}
