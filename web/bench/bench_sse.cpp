// bench_sse.cpp — SSE parsing and the interpretation of OpenAI completion chunks.
#include "web/bench/bench_sse.h"

#include <nlohmann/json.hpp>

namespace spark {

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r') {
      skip_lf_ = true;
      take_line(out);
    } else if (c == '\n') {
      take_line(out);
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::take_line(std::vector<SseEvent>& out) {
  std::string line = std::move(line_);
  line_.clear();
  if (line.empty()) {
    // A blank line ends the event; one without data lines dispatches nothing.
    if (has_data_) out.push_back({std::move(event_), std::move(data_)});
    data_.clear();
    event_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment (keep-alive pings)
  size_t colon = line.find(':');
  std::string field = line.substr(0, colon);
  std::string value;
  if (colon != std::string::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    event_ = value;
  }
  // "id", "retry" and unknown fields do not matter to a benchmark.
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::NONE:
      return "none";
    case ErrorKind::CONNECT:
      return "connect";
    case ErrorKind::TIMEOUT:
      return "timeout";
    case ErrorKind::HTTP_4XX:
      return "http_4xx";
    case ErrorKind::HTTP_5XX:
      return "http_5xx";
    case ErrorKind::STREAM_CUT:
      return "stream_cut";
    case ErrorKind::MALFORMED:
      return "malformed";
    case ErrorKind::STREAM_ERROR:
      return "stream_error";
    case ErrorKind::CANCELLED:
      return "cancelled";
    case ErrorKind::OTHER:
      return "other";
  }
  return "other";
}

bool CompletionStreamReader::feed(std::string_view bytes, double t) {
  if (error_kind_ != ErrorKind::NONE) return false;
  pending_.clear();
  parser_.feed(bytes, pending_);
  for (const SseEvent& ev : pending_)
    if (!handle(ev, t)) return false;
  return true;
}

bool CompletionStreamReader::fail(ErrorKind kind, std::string message) {
  error_kind_ = kind;
  error_message_ = std::move(message);
  return false;
}

namespace {

bool non_empty_string(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

std::optional<long long> integer_at(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<long long>();
}

std::string shorten(std::string_view s, size_t n = 200) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

}  // namespace

bool CompletionStreamReader::handle(const SseEvent& ev, double t) {
  ++events_;
  if (saw_done_) return true;  // anything after [DONE] is ignored, as clients do
  if (ev.data == "[DONE]") {
    saw_done_ = true;
    return true;
  }
  nlohmann::json chunk = nlohmann::json::parse(ev.data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded()) return fail(ErrorKind::MALFORMED, "data is not JSON: " + shorten(ev.data));
  if (!chunk.is_object()) return fail(ErrorKind::MALFORMED, "data is not a JSON object: " + shorten(ev.data));
  if (ev.event == "error" || (chunk.contains("error") && !chunk["error"].is_null()))
    return fail(ErrorKind::STREAM_ERROR, error_message_from_body(ev.data));

  auto choices = chunk.find("choices");
  auto usage = chunk.find("usage");
  bool has_choices = choices != chunk.end() && choices->is_array();
  bool has_usage = usage != chunk.end() && usage->is_object();
  if (!has_choices && !has_usage)
    return fail(ErrorKind::MALFORMED, "chunk has neither choices nor usage: " + shorten(ev.data));

  if (has_choices) {
    bool content = false;
    for (const auto& choice : *choices) {
      if (!choice.is_object()) return fail(ErrorKind::MALFORMED, "a choice is not an object: " + shorten(ev.data));
      if (non_empty_string(choice, "text")) content = true;  // /v1/completions
      auto delta = choice.find("delta");                     // /v1/chat/completions
      if (delta != choice.end() && delta->is_object()) {
        // A role-only first delta is not a token; reasoning text and tool calls are.
        if (non_empty_string(*delta, "content") || non_empty_string(*delta, "reasoning_content") ||
            non_empty_string(*delta, "reasoning"))
          content = true;
        auto calls = delta->find("tool_calls");
        if (calls != delta->end() && calls->is_array() && !calls->empty()) content = true;
      }
      auto finish = choice.find("finish_reason");
      if (finish != choice.end() && !finish->is_null()) saw_finish_ = true;
    }
    if (content) token_times_.push_back(t);
  }
  if (has_usage) {
    if (auto n = integer_at(*usage, "completion_tokens")) usage_completion_ = n;
    if (auto n = integer_at(*usage, "prompt_tokens")) usage_prompt_ = n;
    auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object())
      if (auto n = integer_at(*details, "cached_tokens")) usage_cached_ = n;
  }
  return true;
}

std::string error_message_from_body(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto err = j.find("error");
    if (err != j.end()) {
      if (err->is_string()) return err->get<std::string>();
      if (err->is_object() && err->contains("message") && (*err)["message"].is_string())
        return (*err)["message"].get<std::string>();
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
    if (j.contains("detail") && j["detail"].is_string()) return j["detail"].get<std::string>();
  }
  std::string s = shorten(body);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace spark
