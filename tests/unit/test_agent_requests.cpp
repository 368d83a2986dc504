// test_agent_requests.cpp — the Responses and Messages bodies as the chat requests they
// become (messages, tools, tool_choice, sampling), their refusals, and the response store.
#include <doctest/doctest.h>

#include <string>

#include "web/anthropic/messages_request.h"
#include "web/http_error.h"
#include "web/openai/response_store.h"
#include "web/openai/responses_request.h"

using namespace spark;
using J = nlohmann::ordered_json;

namespace {

constexpr int64_t kVocab = 1000;
const std::string kModel = "m";

ResponsesRequest responses(const std::string& body, const ResponseStore& store = ResponseStore()) {
  return parse_responses_request(body, store, kVocab, kModel);
}

template <typename F>
std::pair<int, std::string> refusal(F&& parse) {
  try {
    parse();
  } catch (const HttpError& e) {
    return {e.status, e.param};
  }
  return {200, ""};
}

}  // namespace

TEST_CASE("responses: instructions, message items, function calls and their outputs become chat messages") {
  ResponsesRequest r = responses(R"({"instructions": "be brief", "max_output_tokens": 9, "temperature": 0.5,
    "input": [{"role": "user", "content": "time?"},
              {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "ask the tool"}]},
              {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{\"tz\": \"UTC\"}"},
              {"type": "function_call_output", "call_id": "c1", "output": "12:30"},
              {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "a"},
                                                                    {"type": "input_text", "text": "b"}]}],
    "tools": [{"type": "function", "name": "now", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "now"}})");
  const J& m = r.chat.messages;
  REQUIRE(m.size() == 5);
  CHECK(m[0] == J{{"role", "system"}, {"content", "be brief"}});
  CHECK(m[1] == J{{"role", "user"}, {"content", "time?"}});
  CHECK(m[2]["role"] == "assistant");
  CHECK(m[2]["reasoning_content"] == "ask the tool");
  CHECK(m[2]["tool_calls"][0]["id"] == "c1");
  CHECK(m[2]["tool_calls"][0]["function"]["arguments"] == J{{"tz", "UTC"}});  // decoded for the template
  CHECK(m[3] == J{{"role", "tool"}, {"content", "12:30"}, {"tool_call_id", "c1"}});
  CHECK(m[4] == J{{"role", "system"}, {"content", "a\nb"}});  // developer is the system role
  CHECK(r.chat.tools[0]["function"]["name"] == "now");
  CHECK(r.chat.tool_choice == ToolChoice::NAMED);
  CHECK(r.chat.tool_name == "now");
  CHECK(*r.chat.params.max_tokens == 9);
  CHECK(r.chat.params.temperature == doctest::Approx(0.5));
  CHECK(r.new_messages.size() == 4);  // the instructions are not part of the stored turn
}

TEST_CASE("responses: refusals name their field") {
  CHECK(refusal([] { responses(R"({"input": 5})"); }) == std::pair<int, std::string>{400, "input"});
  CHECK(refusal([] { responses(R"({"input": "x", "previous_response_id": "resp_1"})"); }) ==
        std::pair<int, std::string>{404, "previous_response_id"});
  CHECK(refusal([] { responses(R"({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]})"); }) ==
        std::pair<int, std::string>{400, "input"});
  CHECK(refusal([] { responses(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}})"); }) ==
        std::pair<int, std::string>{400, "text.format"});
  CHECK(refusal([] { responses(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"); }) ==
        std::pair<int, std::string>{400, "text.format"});
  CHECK(refusal([] { responses(R"({"input": "x", "tools": [{"type": "file_search"}]})"); }) ==
        std::pair<int, std::string>{400, "tools"});
  CHECK(refusal([] { responses(R"({"input": "x", "temperature": 3})"); }) ==
        std::pair<int, std::string>{400, "temperature"});
}

TEST_CASE("responses: previous_response_id puts the stored conversation before the new input") {
  ResponseStore store;
  auto first = std::make_shared<StoredResponse>();
  first->messages = J::array({J{{"role", "user"}, {"content", "hi"}}, J{{"role", "assistant"}, {"content", "hello"}}});
  store.put("resp_1", first, 4);
  auto second = std::make_shared<StoredResponse>();
  second->previous = first;
  second->messages =
      J::array({J{{"role", "user"}, {"content", "again"}}, J{{"role", "assistant"}, {"content", "yes"}}});
  store.put("resp_2", second, 4);
  ResponsesRequest r =
      responses(R"({"input": "third", "instructions": "sys", "previous_response_id": "resp_2"})", store);
  REQUIRE(r.chat.messages.size() == 6);
  CHECK(r.chat.messages[0]["content"] == "sys");
  CHECK(r.chat.messages[1]["content"] == "hi");
  CHECK(r.chat.messages[4]["content"] == "yes");
  CHECK(r.chat.messages[5]["content"] == "third");
  CHECK(r.previous == second);
}

TEST_CASE("response store: the oldest are forgotten past the capacity; their turns live on in later ones") {
  ResponseStore store;
  std::shared_ptr<const StoredResponse> previous;
  for (int i = 0; i < 5; ++i) {
    auto s = std::make_shared<StoredResponse>();
    s->previous = previous;
    s->messages = J::array({J{{"role", "user"}, {"content", std::to_string(i)}}});
    store.put("r" + std::to_string(i), s, 3);
    previous = s;
  }
  CHECK(store.size() == 3);
  CHECK(store.get("r0") == nullptr);
  CHECK(store.get("r1") == nullptr);
  REQUIRE(store.get("r4") != nullptr);
  J all = ResponseStore::conversation(*store.get("r4"));
  REQUIRE(all.size() == 5);
  CHECK(all[0]["content"] == "0");
  CHECK(all[4]["content"] == "4");
  store.put("r5", previous, 0);  // capacity 0 keeps nothing new
  CHECK(store.get("r5") == nullptr);
}

TEST_CASE("messages: system, text, tool_use, tool_result and thinking blocks become chat messages") {
  ApiRequest r = parse_messages_request(R"({"model": "m", "max_tokens": 7, "system": [{"type": "text", "text": "sys"}],
    "messages": [{"role": "user", "content": "time?"},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "use it", "signature": "s"},
                                                   {"type": "text", "text": "checking"},
                                                   {"type": "tool_use", "id": "t1", "name": "now", "input": {"tz": "UTC"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "12:30"}]},
                                              {"type": "text", "text": "thanks"}]}],
    "tools": [{"name": "now", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"},
    "stop_sequences": ["END"], "top_k": 5, "thinking": {"type": "disabled"}})",
                                        kVocab, kModel, false);
  const J& m = r.messages;
  REQUIRE(m.size() == 5);
  CHECK(m[0] == J{{"role", "system"}, {"content", "sys"}});
  CHECK(m[2]["content"] == "checking");
  CHECK(m[2]["reasoning_content"] == "use it");
  CHECK(m[2]["tool_calls"][0]["function"]["arguments"] == J{{"tz", "UTC"}});
  CHECK(m[3] == J{{"role", "tool"}, {"content", "12:30"}, {"tool_call_id", "t1"}});
  CHECK(m[4] == J{{"role", "user"}, {"content", "thanks"}});
  CHECK(r.tools[0]["function"]["parameters"] == J{{"type", "object"}});
  CHECK(r.tool_choice == ToolChoice::REQUIRED);
  CHECK(r.params.stop == std::vector<std::string>{"END"});
  CHECK(r.params.top_k == 5);
  CHECK(*r.params.max_tokens == 7);
  CHECK(r.template_kwargs["enable_thinking"] == false);
}

TEST_CASE("messages: max_tokens is required except for count_tokens; unknown tool results are refused") {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  CHECK(refusal([&] { parse_messages_request("{" + user + "}", kVocab, kModel, false); }).second == "max_tokens");
  CHECK(parse_messages_request("{" + user + "}", kVocab, kModel, true).messages.size() == 1);
  CHECK(refusal([&] {
          parse_messages_request(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": "1"}]}]})",
                                 kVocab, kModel, false);
        }).first == 400);
  CHECK(refusal([&] {
          parse_messages_request(R"({"max_tokens": 1, "model": "other", )" + user + "}", kVocab, kModel, false);
        }).first == 404);
}
