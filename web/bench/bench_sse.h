// bench_sse.h — incremental Server-Sent Events parsing and the reading of an OpenAI
// completion stream into per-request timings, token counts and error kinds.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

// One dispatched SSE event: the "event:" name ("" when absent) and its data lines joined by '\n'.
struct SseEvent {
  std::string event;
  std::string data;
};

// Parses an SSE byte stream that arrives in arbitrary pieces (a line, an event or a JSON
// object may be split anywhere). Follows the WHATWG rules: lines end with CRLF, LF or CR;
// a blank line dispatches the event; lines starting with ':' are comments; one optional
// space after the field colon is dropped. An event not ended by a blank line when the
// stream closes is incomplete and is never dispatched.
class SseParser {
 public:
  // Appends the complete events found in `bytes` to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);
  // True when bytes of an unfinished line or event are waiting for more input.
  bool has_partial() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  void take_line(std::vector<SseEvent>& out);
  std::string line_;
  bool skip_lf_ = false;  // the previous piece ended with CR: a leading LF belongs to it
  std::string data_;
  bool has_data_ = false;
  std::string event_;
};

// Why a request did not succeed. The names are the ones the report and the JSON use.
enum class ErrorKind {
  NONE,
  CONNECT,       // no connection (refused, unreachable, DNS, TLS handshake)
  TIMEOUT,       // --timeout passed before the stream ended, or the server went silent
  HTTP_4XX,      // the server refused the request
  HTTP_5XX,      // the server failed the request
  STREAM_CUT,    // the stream ended before [DONE] and before a finish_reason
  MALFORMED,     // a data line that is not JSON, or JSON that is not a completion chunk
  STREAM_ERROR,  // the server sent an {"error": ...} event inside a 200 stream
  CANCELLED,     // still in flight when the run was interrupted
  OTHER,         // anything else (an unexpected status such as 3xx, a write failure)
};
const char* error_kind_name(ErrorKind kind);
constexpr int kErrorKindCount = int(ErrorKind::OTHER) + 1;

// Reads the body of one streamed /v1/completions or /v1/chat/completions response.
// Times are seconds since the request was sent, supplied by the caller with each piece
// so that the reader itself never looks at a clock.
class CompletionStreamReader {
 public:
  // Feeds bytes that arrived at time `t`; returns false once the stream must not be read
  // further (a malformed chunk or an error event was seen).
  bool feed(std::string_view bytes, double t);

  // Times of the chunks that carried generated content (text, content, reasoning or a
  // tool call); the first is the time to first token.
  const std::vector<double>& token_times() const { return token_times_; }
  bool saw_done() const { return saw_done_; }      // data: [DONE]
  bool saw_finish() const { return saw_finish_; }  // a choice with a finish_reason
  // A stream is complete when it said [DONE], or it gave a finish_reason (servers that
  // omit [DONE]) and then closed cleanly: the caller knows which close it was.
  bool complete_on_clean_close() const { return saw_done_ || saw_finish_; }
  std::optional<long long> usage_completion_tokens() const { return usage_completion_; }
  std::optional<long long> usage_prompt_tokens() const { return usage_prompt_; }
  std::optional<long long> usage_cached_tokens() const { return usage_cached_; }
  ErrorKind error_kind() const { return error_kind_; }  // MALFORMED, STREAM_ERROR or NONE
  const std::string& error_message() const { return error_message_; }
  size_t events() const { return events_; }

 private:
  bool handle(const SseEvent& ev, double t);
  bool fail(ErrorKind kind, std::string message);
  SseParser parser_;
  std::vector<SseEvent> pending_;
  std::vector<double> token_times_;
  bool saw_done_ = false;
  bool saw_finish_ = false;
  std::optional<long long> usage_completion_, usage_prompt_, usage_cached_;
  ErrorKind error_kind_ = ErrorKind::NONE;
  std::string error_message_;
  size_t events_ = 0;
};

// The message of an OpenAI-shaped error body ({"error": {"message": ...}} or
// {"error": "..."} or {"message": ...}); otherwise the body itself, shortened.
std::string error_message_from_body(std::string_view body);

}  // namespace spark
