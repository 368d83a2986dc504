// test_chat_format.cpp — the chat-format registry: which built-in format each kind of
// template gets, and that a format is one class and one registration: a fake format,
// defined only here, is detected from a model's template and reads answers through the
// same entry points the server uses (detect_model_traits, make_output_parser).
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "engine/template/chat_template.h"
#include "tests/unit/fixture_files.h"
#include "web/chat_format/chat_format.h"
#include "web/chat_format/think.h"
#include "web/chat_prompt.h"
#include "web/server.h"

using namespace spark;

namespace {

const char* detected(const std::string& with_tools, const std::string& without_tools = "") {
  return detect_chat_format(TemplateText{with_tools, without_tools}).name();
}

// Calls written as `>>>NAME(ARGS-JSON)` lines, anywhere in the answer.
class ArrowFormat : public ChatFormat {
 public:
  const char* name() const override { return "arrow"; }
  bool detect(const TemplateText& text) const override { return text.with_tools.find(">>>") != std::string::npos; }
  std::optional<ForcedCall> force_call(const nlohmann::ordered_json&, const std::string* named) const override {
    if (!named) return std::nullopt;
    return ForcedCall{">>>" + *named + "(", {}};
  }
  std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const nlohmann::ordered_json&, const std::shared_ptr<const constrain::TokenTable>&) const override {
    return std::make_shared<constrain::ToolTrigger>();
  }
  std::unique_ptr<OutputParser> make_parser(const OutputParserOptions& options) const override {
    return think_then(options, options.tools ? std::make_unique<ArrowAnswer>() : content_only());
  }

 private:
  // Whole lines: a line that is a call becomes one, any other is content.
  class ArrowAnswer : public AnswerSplitter {
    void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
      if (!strip_space(buf)) return;
      for (;;) {
        size_t eol = buf.find('\n');
        if (eol == std::string::npos && !final) return;
        std::string line = buf.substr(0, eol == std::string::npos ? buf.size() : eol + 1);
        buf.erase(0, line.size());
        const size_t open = line.find('(');
        if (line.rfind(">>>", 0) == 0 && open != std::string::npos && line.find(')') != std::string::npos) {
          OutputEvent e;
          e.kind = OutputEvent::TOOL_CALL;
          e.call = {"call_1", line.substr(3, open - 3), line.substr(open + 1, line.rfind(')') - open - 1)};
          out.push_back(std::move(e));
        } else {
          emit(out, OutputEvent::CONTENT, line);
        }
        if (buf.empty()) return;
      }
    }
  };
};

struct Registered {
  const ChatFormat& format;
  explicit Registered(const ChatFormat& f) : format(f) { register_chat_format(f); }
  ~Registered() { unregister_chat_format(format); }
};

}  // namespace

TEST_CASE("chat formats: each kind of template gets its format; one that shows none gets Hermes") {
  CHECK(std::string(detected("{{ '<tool_call>' }}")) == "hermes");
  CHECK(std::string(detected("{{ '<|python_tag|>' }}")) == "llama3");
  CHECK(std::string(detected("{% if m.role == 'ipython' %}{% endif %}")) == "llama3");
  CHECK(std::string(detected("<tool_call> and ipython")) == "hermes");
  CHECK(std::string(detected("<|start|>{{ r }}<|channel|>analysis<|message|> <tool_call>")) == "harmony");
  CHECK(std::string(detected("<|channel|> alone")) == "hermes");
  CHECK(std::string(detected("{{ '<|tool_call>call:' + n + '{' }}{{ '<|\"|>' + s + '<|\"|>' }}")) == "gemma4");
  CHECK(std::string(detected("{{ '<|tool_call>' }}")) == "hermes");  // half the marks is not the format
  CHECK(std::string(detected("{{ messages }}")) == "hermes");
  CHECK(&default_chat_format() == find_chat_format("hermes"));
  CHECK(find_chat_format("none such") == nullptr);
  CHECK(find_chat_format("harmony")->reads_special_tokens());
  CHECK(!find_chat_format("llama3")->reads_special_tokens());
  CHECK(find_chat_format("gemma4")->reads_special_tokens());
}

TEST_CASE("chat formats: forced calls open in the prompt for the JSON formats and Gemma 4, not for harmony") {
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const std::string f = "f";
  CHECK(find_chat_format("hermes")->force_call(tools, nullptr)->prefill == "<tool_call>\n{\"name\": \"");
  CHECK(find_chat_format("hermes")->force_call(tools, &f)->prefill == "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
  CHECK(find_chat_format("hermes")->force_call(tools, nullptr)->rest.closing == "}\n</tool_call>");
  CHECK(find_chat_format("llama3")->force_call(tools, &f)->prefill == "{\"name\": \"f\", \"parameters\": ");
  CHECK(find_chat_format("llama3")->force_call(tools, nullptr)->rest.tools.at(0).first == "f\", \"parameters\": ");
  CHECK(!find_chat_format("harmony")->force_call(tools, &f));
  // Gemma 4: the call opens in the prompt up to the name (through it when named).
  CHECK(find_chat_format("gemma4")->force_call(tools, &f)->prefill == "<|tool_call>call:f");
  CHECK(find_chat_format("gemma4")->force_call(tools, nullptr)->prefill == "<|tool_call>call:");
  CHECK(find_chat_format("gemma4")->force_call(tools, nullptr)->rest.tools.at(0).first == "f");
  CHECK(find_chat_format("gemma4")->force_call(tools, nullptr)->rest.closing == "<tool_call|>");
  const auto trigger = find_chat_format("gemma4")->auto_trigger(tools, nullptr);
  REQUIRE(trigger);
  CHECK(trigger->opening == "<|tool_call>");
}

TEST_CASE("chat formats: Gemma 4's published template is detected as gemma4") {
  std::ifstream in(testing::fixtures_dir() + "/tokenizers/gemma4/chat_template.jinja", std::ios::binary);
  REQUIRE_MESSAGE(in, "gemma4 chat_template.jinja missing " << testing::fixtures_hint());
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(std::string(detect_chat_format(TemplateText{source, source}).name()) == "gemma4");
  // It thinks in its thought channel when enable_thinking asks it to.
  CHECK(template_thinks(TemplateText{source, source}));
  CHECK(!template_thinks_unasked(TemplateText{source, source}));  // only when enable_thinking is true
  const std::string qwen = "{{ '<think>\\n' }}";
  CHECK(template_thinks(TemplateText{qwen, qwen}));
  CHECK(template_thinks_unasked(TemplateText{qwen, qwen}));
  const std::string no_switch = "{{ '<|channel>thought\n<channel|>' }}";
  CHECK(!template_thinks(TemplateText{no_switch, no_switch}));
}

TEST_CASE("chat formats: a format registered from outside is detected and parses answers") {
  Config config;
  ServerState state;
  HttpServer http(config.server, state);
  App app{config, state, http, "m"};
  ChatTemplate tmpl = ChatTemplate::from_source(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}>>>{% endif %}", "", "");
  app.chat_template = &tmpl;

  detect_model_traits(app);
  CHECK(std::string(app.chat_format->name()) == "hermes");  // before: the default

  ArrowFormat arrow;
  {
    Registered registration(arrow);
    detect_model_traits(app);
    REQUIRE(app.chat_format == &arrow);
    CHECK(find_chat_format("arrow") == &arrow);
    CHECK(!app.thinking_model);

    auto parser = make_output_parser({app.chat_format, /*tools=*/true, /*reasoning=*/true, false});
    std::vector<OutputEvent> events;
    auto take = [&](std::vector<OutputEvent> more) {  // text of one kind joined across deltas
      for (auto& e : more)
        if (!events.empty() && e.kind != OutputEvent::TOOL_CALL && events.back().kind == e.kind)
          events.back().text += e.text;
        else
          events.push_back(std::move(e));
    };
    for (std::string piece :
         {"<think>hm", "m</think>\n\nLet me look.\n>>>get_", "weather({\"city\": \"Oslo\"})\nDone."})
      take(parser->push(piece));
    take(parser->finish());
    REQUIRE(events.size() == 4);
    CHECK(events[0].kind == OutputEvent::REASONING);
    CHECK(events[0].text == "hmm");
    CHECK(events[1].kind == OutputEvent::CONTENT);
    CHECK(events[1].text == "Let me look.\n");
    CHECK(events[2].kind == OutputEvent::TOOL_CALL);
    CHECK(events[2].call.name == "get_weather");
    CHECK(events[2].call.arguments == "{\"city\": \"Oslo\"}");
    CHECK(events[3].text == "Done.");
    CHECK(parser->num_tool_calls() == 1);

    auto no_tools = make_output_parser({app.chat_format, false, false, false});
    auto plain = no_tools->push(">>>f({})\n");
    CHECK(no_tools->num_tool_calls() == 0);
    REQUIRE(plain.size() == 1);
    CHECK(plain[0].text == ">>>f({})\n");
  }
  detect_model_traits(app);
  CHECK(std::string(app.chat_format->name()) == "hermes");  // unregistered again
}
