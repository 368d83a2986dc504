// test_openai_request.cpp — request parsing: every field's type and range, the error's
// status and param, and what reaches the engine.
#include <doctest/doctest.h>

#include <string>

#include "web/http_error.h"
#include "web/openai_request.h"
#include "web/openai_response.h"

using namespace spark;

namespace {

constexpr int64_t kVocab = 1000;
const std::string kModel = "m";

ApiRequest chat(const std::string& extra) {
  std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" +
                     (extra.empty() ? std::string() : ", " + extra) + "}";
  return parse_api_request(body, ApiKind::CHAT, kVocab, kModel);
}

// The error a body gets: status and param.
std::pair<int, std::string> refusal(const std::string& body, ApiKind kind = ApiKind::CHAT) {
  try {
    parse_api_request(body, kind, kVocab, kModel);
  } catch (const HttpError& e) {
    return {e.status, e.param};
  }
  return {200, ""};
}

std::pair<int, std::string> chat_refusal(const std::string& extra) {
  return refusal(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}");
}

}  // namespace

TEST_CASE("chat: defaults and accepted fields reach the sampling params") {
  ApiRequest r = chat(R"("temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "max_tokens": 12,
                         "stop": ["a", "b"], "presence_penalty": 1, "frequency_penalty": -1, "logprobs": true,
                         "top_logprobs": 3, "n": 2, "logit_bias": {"5": -100, "9": 2.5}, "stream": true,
                         "stream_options": {"include_usage": true}, "unknown_field": {"ignored": true}, "user": "u")");
  CHECK(r.params.temperature == 0.5);
  CHECK(r.params.top_p == 0.9);
  CHECK(r.params.top_k == 40);
  CHECK(r.params.seed == 7u);
  CHECK(r.params.max_tokens == 12);
  CHECK(r.params.stop == std::vector<std::string>{"a", "b"});
  CHECK(r.params.logprobs);
  CHECK(r.params.top_logprobs == 3);
  CHECK(r.n == 2);
  CHECK(r.params.logit_bias.at(5) == -100.0f);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.messages.size() == 1);
  ApiRequest d = chat("");
  CHECK(d.params.temperature == 1.0);
  CHECK(!d.params.max_tokens);
  CHECK(d.n == 1);
  CHECK(d.tool_choice == ToolChoice::NONE);
}

TEST_CASE("chat: max_completion_tokens wins; tiny temperatures become the sampler's floor") {
  CHECK(chat(R"("max_tokens": 5, "max_completion_tokens": 9)").params.max_tokens == 9);
  CHECK(chat(R"("temperature": 0.001)").params.temperature == 0.01);
  CHECK(chat(R"("temperature": 0)").params.temperature == 0.0);
  CHECK(chat(R"("n": 2.0)").n == 2);
}

TEST_CASE("chat: out-of-range and wrong-typed fields are refused with their param") {
  struct Case {
    std::string extra;
    std::string param;
  };
  const Case cases[] = {
      {R"("temperature": -0.1)", "temperature"}, {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": "hot")", "temperature"}, {R"("temperature": 1e999)", ""},
      {R"("top_p": 0)", "top_p"}, {R"("top_p": 1.01)", "top_p"}, {R"("top_k": -2)", "top_k"},
      {R"("top_k": 1.5)", "top_k"}, {R"("min_p": 1.5)", "min_p"}, {R"("presence_penalty": 3)", "presence_penalty"},
      {R"("frequency_penalty": -2.1)", "frequency_penalty"}, {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("max_tokens": 0)", "max_tokens"}, {R"("max_tokens": -5)", "max_tokens"},
      {R"("max_tokens": 99999999999999999999)", "max_tokens"}, {R"("n": 0)", "n"}, {R"("n": 17)", "n"},
      {R"("n": 1000000)", "n"}, {R"("stop": "")", "stop"}, {R"("stop": [""])", "stop"}, {R"("stop": 5)", "stop"},
      {R"("stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])", "stop"},
      {R"("logprobs": 1)", "logprobs"}, {R"("top_logprobs": 3)", "top_logprobs"},
      {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"}, {R"("logit_bias": {"1000": 1})", "logit_bias"},
      {R"("logit_bias": {"-1": 1})", "logit_bias"}, {R"("logit_bias": {"x": 1})", "logit_bias"},
      {R"("logit_bias": {"5": 101})", "logit_bias"}, {R"("logit_bias": [1])", "logit_bias"},
      {R"("stream": "yes")", "stream"}, {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("response_format": {"type": "xml"})", "response_format"},
      {R"("response_format": {"type": "json_schema"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": 5}})", "response_format"},
      {R"("guided_choice": [])", "guided_choice"}, {R"("guided_regex": 5)", "guided_regex"},
      {R"("guided_grammar": "root ::= x")", "guided_grammar"}, {R"("structured_outputs": {"grammar": "x"})", "structured_outputs"},
      {R"("guided_choice": ["a"], "guided_regex": "b")", "guided_choice"},
      {R"("tool_choice": "required")", "tool_choice"}, {R"("tools": [{"type": "function"}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})", "tool_choice"},
      {R"("seed": "1")", "seed"}, {R"("min_tokens": 10, "max_tokens": 5)", "min_tokens"},
      {R"("stop_token_ids": [1000])", "stop_token_ids"}, {R"("best_of": 3)", "best_of"},
      {R"("chat_template_kwargs": [])", "chat_template_kwargs"}, {R"("user": 5)", "user"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.extra);
    auto [status, param] = chat_refusal(c.extra);
    CHECK(status == 400);
    CHECK(param == c.param);
  }
}

TEST_CASE("messages: shapes and roles") {
  CHECK(refusal(R"({"messages": []})").first == 400);
  CHECK(refusal(R"({"messages": "hi"})").second == "messages");
  CHECK(refusal(R"({})").second == "messages");
  CHECK(refusal(R"({"messages": [{"role": "wizard", "content": "x"}]})").second == "messages");
  CHECK(refusal(R"({"messages": [{"content": "x"}]})").second == "messages");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})").first == 400);
  ApiRequest r = parse_api_request(
      R"({"messages": [{"role": "developer", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "42"}]})",
      ApiKind::CHAT, kVocab, kModel);
  CHECK(r.messages[0]["role"] == "system");
  CHECK(r.messages[1]["content"] == "a\nb");
  CHECK(r.messages[2]["content"] == "");
  CHECK(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"] == 1);
  CHECK(r.messages[3]["tool_call_id"] == "call_1");
}

TEST_CASE("messages: normalised as vLLM hands them to the template") {
  // The shapes agent frameworks send: the OpenAI Agents SDK's content null beside
  // tool_calls, missing content, parts of several text kinds, tool results as parts.
  ApiRequest r = parse_api_request(
      R"({"messages": [{"role": "user"},
                       {"role": "user", "content": null},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "not json"}}]},
                       {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "1"},
                         {"type": "text", "text": null}, {"type": "input_text", "text": "2"}]},
                       {"role": "assistant", "content": [{"type": "output_text", "text": "a"},
                         {"type": "refusal", "refusal": "b"}], "tool_calls": [], "reasoning": "r"},
                       {"role": "assistant", "tool_calls": [{"function": {"name": "g"}}]}]})",
      ApiKind::CHAT, kVocab, kModel);
  REQUIRE(r.messages.size() == 6);
  CHECK(r.messages[0]["content"] == "");
  CHECK(r.messages[1]["content"] == "");
  CHECK(r.messages[2]["content"] == "");
  CHECK(r.messages[2]["tool_calls"][0]["function"]["arguments"] == nlohmann::ordered_json::object());
  CHECK(r.messages[3]["content"] == "1\n2");
  CHECK(r.messages[4]["content"] == "a\nb");
  CHECK(!r.messages[4].contains("tool_calls"));
  CHECK(r.messages[4]["reasoning_content"] == "r");
  CHECK(r.messages[5]["content"] == "");
  CHECK(r.messages[5]["tool_calls"][0]["function"]["arguments"] == nlohmann::ordered_json::object());
  CHECK(refusal(R"({"messages": [{"role": "user", "content": 5}]})").second == "messages");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})").second == "messages");
}

TEST_CASE("model: absent is the served model; another name is 404 model_not_found") {
  CHECK(refusal(R"({"model": "other", "messages": [{"role": "user", "content": "x"}]})").first == 404);
  try {
    parse_api_request(R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})", ApiKind::CHAT, kVocab, kModel);
    FAIL("no error");
  } catch (const HttpError& e) {
    CHECK(e.code == "model_not_found");
    CHECK(std::string(e.what()).find("gpt-4") != std::string::npos);
  }
}

TEST_CASE("bodies that are not JSON objects, or nest too deep") {
  CHECK(refusal("not json").first == 400);
  CHECK(refusal("[1, 2]").first == 400);
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "x"}], "temperature": NaN})").first == 400);
  CHECK(refusal(std::string(100000, '[') + std::string(100000, ']')).first == 400);
  CHECK(refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}").first == 400);
  CHECK(refusal("").first == 400);
}

TEST_CASE("tools and tool_choice") {
  std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  CHECK(chat(tools).tool_choice == ToolChoice::AUTO);
  CHECK(chat(tools + R"(, "tool_choice": "none")").tool_choice == ToolChoice::NONE);
  CHECK(chat(tools + R"(, "tool_choice": "required")").tool_choice == ToolChoice::REQUIRED);
  ApiRequest named = chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  CHECK(named.tool_choice == ToolChoice::NAMED);
  CHECK(named.tool_name == "get_weather");
}

TEST_CASE("completions: prompt forms, token ids in the vocabulary, echo and legacy logprobs") {
  auto comp = [](const std::string& body) { return parse_api_request(body, ApiKind::COMPLETION, kVocab, kModel); };
  CHECK(comp(R"({"prompt": "hello"})").prompt_texts.size() == 1);
  CHECK(comp(R"({"prompt": ["a", "b"], "n": 2})").num_prompts() == 2);
  CHECK(comp(R"({"prompt": [1, 2, 3]})").prompt_ids[0] == std::vector<int32_t>{1, 2, 3});
  CHECK(comp(R"({"prompt": [[1], [2, 3]]})").prompt_ids.size() == 2);
  CHECK(comp(R"({"prompt": "x", "logprobs": 2})").params.top_logprobs == 2);
  CHECK(refusal(R"({"prompt": [1, -1]})", ApiKind::COMPLETION).second == "prompt");
  CHECK(refusal(R"({"prompt": [1, 1000]})", ApiKind::COMPLETION).second == "prompt");
  CHECK(refusal(R"({"prompt": []})", ApiKind::COMPLETION).second == "prompt");
  CHECK(refusal(R"({"prompt": ["a", [1]]})", ApiKind::COMPLETION).second == "prompt");
  CHECK(refusal(R"({})", ApiKind::COMPLETION).second == "prompt");
  CHECK(refusal(R"({"prompt": "x", "logprobs": 21})", ApiKind::COMPLETION).second == "logprobs");
  CHECK(refusal(R"({"prompt": "x", "suffix": "y"})", ApiKind::COMPLETION).second == "suffix");
  CHECK(refusal(R"({"prompt": ["a","b","c","d","e","f","g","h","i"], "n": 16})", ApiKind::COMPLETION).second == "n");
}

TEST_CASE("responses: usage carries cached tokens; finish reasons") {
  Usage u{10, 5, 8};
  auto j = usage_json(u);
  CHECK(j["total_tokens"] == 15);
  CHECK(j["prompt_tokens_details"]["cached_tokens"] == 8);
  ChoiceResult c;
  c.finish = FinishReason::STOP;
  CHECK(finish_reason_text(c) == "stop");
  c.tool_calls.push_back({"call_1", "f", "{}"});
  CHECK(finish_reason_text(c) == "tool_calls");
  c.finish = FinishReason::LENGTH;
  CHECK(finish_reason_text(c) == "tool_calls");
  c.tool_calls.clear();
  CHECK(finish_reason_text(c) == "length");
  c.tool_calls.push_back({"call_1", "f", "{}"});
  ResponseHead head{"chatcmpl-1", 1, "m"};
  auto resp = chat_response(head, {c}, {nullptr}, u);
  CHECK(resp["choices"][0]["message"]["content"].is_null());
  CHECK(resp["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}");
  CHECK(dump_json(chat_chunk(head, 0, {{"content", "x"}}, nullptr, nullptr, true)) ==
        R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null})");
}
