// openai_response.cpp — builders for OpenAI-shaped responses and stream chunks.
#include "web/openai_response.h"

#include <cmath>

#include "engine/tokenizer/tokenizer.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

std::string token_string(const Tokenizer& tok, int32_t id) { return tok.decode({id}, /*skip_special_tokens=*/false); }

J bytes_of(const std::string& s) {
  J b = J::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// JSON has no -Infinity: a token the sampler masked out is reported with a floor value.
double finite_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

// The fields every response and chunk starts with.
J envelope(const ResponseHead& head, const char* object) {
  return J{{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model}};
}

}  // namespace

std::string finish_reason_text(const ChoiceResult& c) {
  // A parsed call is complete JSON, so it ends the turn as a call even when max_tokens
  // fell right after it (as vLLM reports it).
  if (!c.tool_calls.empty()) return "tool_calls";
  if (c.finish && *c.finish == FinishReason::LENGTH) return "length";
  return "stop";
}

J usage_json(const Usage& u) {
  J j = J::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

J chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int32_t top) {
  J content = J::array();
  for (const auto& lp : lps) {
    std::string text = token_string(tok, lp.token);
    J item = J::object();
    item["token"] = text;
    item["logprob"] = finite_logprob(lp.logprob);
    item["bytes"] = bytes_of(text);
    J alts = J::array();
    for (size_t k = 0; k < lp.top.size() && int32_t(k) < top; ++k) {
      std::string alt = token_string(tok, lp.top[k].first);
      alts.push_back(J{{"token", alt}, {"logprob", finite_logprob(lp.top[k].second)}, {"bytes", bytes_of(alt)}});
    }
    item["top_logprobs"] = std::move(alts);
    content.push_back(std::move(item));
  }
  J j = J::object();
  j["content"] = std::move(content);
  j["refusal"] = nullptr;
  return j;
}

J completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int32_t top, size_t text_offset) {
  J tokens = J::array(), token_logprobs = J::array(), tops = J::array(), offsets = J::array();
  for (const auto& lp : lps) {
    std::string text = token_string(tok, lp.token);
    tokens.push_back(text);
    token_logprobs.push_back(finite_logprob(lp.logprob));
    J alts = J::object();
    for (size_t k = 0; k < lp.top.size() && int32_t(k) < top; ++k)
      alts[token_string(tok, lp.top[k].first)] = finite_logprob(lp.top[k].second);
    tops.push_back(top > 0 ? std::move(alts) : J(nullptr));
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  J j = J::object();
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

J tool_calls_json(const std::vector<ToolCall>& calls) {
  J out = J::array();
  for (const auto& c : calls) {
    J call = J::object();
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = J{{"name", c.name}, {"arguments", c.arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

J chat_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices, const std::vector<J>& logprobs,
                const Usage& usage) {
  J out = envelope(head, "chat.completion");
  J list = J::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    J message = J::object();
    message["role"] = "assistant";
    message["content"] = c.text.empty() && !c.tool_calls.empty() ? J(nullptr) : J(c.text);
    message["refusal"] = nullptr;
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) message["tool_calls"] = tool_calls_json(c.tool_calls);
    J choice = J::object();
    choice["index"] = i;
    choice["message"] = std::move(message);
    choice["logprobs"] = i < logprobs.size() ? logprobs[i] : J(nullptr);
    choice["finish_reason"] = finish_reason_text(c);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

J completion_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices, const std::vector<J>& logprobs,
                      const Usage& usage) {
  J out = envelope(head, "text_completion");
  J list = J::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    J choice = J::object();
    choice["index"] = i;
    choice["text"] = choices[i].text;
    choice["logprobs"] = i < logprobs.size() ? logprobs[i] : J(nullptr);
    choice["finish_reason"] = finish_reason_text(choices[i]);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

J chat_chunk(const ResponseHead& head, size_t index, J delta, J logprobs, J finish_reason, bool with_usage_field) {
  J out = envelope(head, "chat.completion.chunk");
  J choice = J::object();
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  out["choices"] = J::array({std::move(choice)});
  if (with_usage_field) out["usage"] = nullptr;
  return out;
}

J completion_chunk(const ResponseHead& head, size_t index, const std::string& text, J logprobs, J finish_reason,
                   bool with_usage_field) {
  J out = envelope(head, "text_completion");
  J choice = J::object();
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  out["choices"] = J::array({std::move(choice)});
  if (with_usage_field) out["usage"] = nullptr;
  return out;
}

J usage_chunk(const ResponseHead& head, const char* object, const Usage& usage) {
  J out = envelope(head, object);
  out["choices"] = J::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string dump_json(const J& j) { return j.dump(-1, ' ', false, J::error_handler_t::replace); }

}  // namespace spark
