// test_bench_sse.cpp — SSE parsing of streams split at every byte, and the reading of
// OpenAI completion chunks into token times, usage and error kinds.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "web/bench/bench_sse.h"

using namespace spark;

namespace {

std::vector<SseEvent> parse_in_pieces(const std::string& stream, size_t piece) {
  SseParser p;
  std::vector<SseEvent> out;
  for (size_t i = 0; i < stream.size(); i += piece) p.feed(std::string_view(stream).substr(i, piece), out);
  return out;
}

std::string completion_chunk(const std::string& text, const char* finish = nullptr) {
  std::string f = finish ? std::string("\"") + finish + "\"" : "null";
  return "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"" + text + "\",\"finish_reason\":" + f + "}]}\n\n";
}

}  // namespace

TEST_CASE("sse: events come out the same however the stream is split") {
  std::string stream =
      ": keep-alive comment\n"
      "data: {\"a\":1}\n\n"
      "event: note\r\ndata: first line\r\ndata:second line\r\n\r\n"
      "id: 7\rdata: cr only\r\r"
      "retry: 10\n\n"  // no data lines: dispatches nothing
      "data: [DONE]\n\n";
  std::vector<SseEvent> whole = parse_in_pieces(stream, stream.size());
  REQUIRE(whole.size() == 4);
  CHECK(whole[0].data == "{\"a\":1}");
  CHECK(whole[0].event == "");
  CHECK(whole[1].event == "note");
  CHECK(whole[1].data == "first line\nsecond line");  // one optional space is dropped, not two
  CHECK(whole[2].data == "cr only");
  CHECK(whole[3].data == "[DONE]");
  for (size_t piece = 1; piece <= 7; ++piece) {
    CAPTURE(piece);
    std::vector<SseEvent> split = parse_in_pieces(stream, piece);
    REQUIRE(split.size() == whole.size());
    for (size_t i = 0; i < split.size(); ++i) {
      CHECK(split[i].data == whole[i].data);
      CHECK(split[i].event == whole[i].event);
    }
  }
}

TEST_CASE("sse: a CRLF split between two pieces is one line end, not two") {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("data: x\r", out);
  p.feed("\n", out);  // ends the line begun above; not the blank line
  CHECK(out.empty());
  p.feed("\r\n", out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].data == "x");
}

TEST_CASE("sse: an event not closed by a blank line is held back, never dispatched half") {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("data: {\"choices\":[{\"te", out);
  CHECK(out.empty());
  CHECK(p.has_partial());
  p.feed("xt\":\"a\"}]}\n", out);
  CHECK(out.empty());
  CHECK(p.has_partial());
  p.feed("\n", out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].data == "{\"choices\":[{\"text\":\"a\"}]}");
  CHECK_FALSE(p.has_partial());
}

TEST_CASE("stream reader: token times, finish and usage from a completion stream split mid-JSON") {
  std::string stream = completion_chunk(" a") + completion_chunk(" b") + completion_chunk(" c", "length") +
                       "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n"
                       "data: [DONE]\n\n";
  // Feed in pieces of 5 bytes, with the time of each piece being its index.
  CompletionStreamReader r;
  double t = 0;
  for (size_t i = 0; i < stream.size(); i += 5, t += 1) REQUIRE(r.feed(std::string_view(stream).substr(i, 5), t));
  REQUIRE(r.token_times().size() == 3);
  // Each token's time is the time of the piece that completed its event.
  size_t end_a = completion_chunk(" a").size();
  CHECK(r.token_times()[0] == double((end_a - 1) / 5));
  CHECK(r.token_times()[0] < r.token_times()[1]);
  CHECK(r.token_times()[1] < r.token_times()[2]);
  CHECK(r.saw_finish());
  CHECK(r.saw_done());
  CHECK(r.usage_completion_tokens() == 3);
  CHECK(r.usage_prompt_tokens() == 12);
  CHECK(r.usage_cached_tokens() == 8);
  CHECK(r.error_kind() == ErrorKind::NONE);
}

TEST_CASE("stream reader: a chat role-only delta is not a token; content, reasoning and tool calls are") {
  CompletionStreamReader r;
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n", 1.0));
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":null}]}\n\n", 1.5));
  CHECK(r.token_times().empty());
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n", 2.0));
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", 3.0));
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n", 4.0));
  CHECK(r.feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", 5.0));
  CHECK(r.token_times() == std::vector<double>{2.0, 3.0, 4.0});
  CHECK(r.saw_finish());
  CHECK_FALSE(r.saw_done());
  CHECK(r.complete_on_clean_close());
  CHECK_FALSE(r.usage_completion_tokens().has_value());
}

TEST_CASE("stream reader: malformed data stops the stream with MALFORMED") {
  CompletionStreamReader r;
  CHECK(r.feed(completion_chunk("x"), 1.0));
  CHECK_FALSE(r.feed("data: {\"choices\": [\n\n", 2.0));
  CHECK(r.error_kind() == ErrorKind::MALFORMED);
  CHECK_FALSE(r.feed(completion_chunk("y"), 3.0));  // nothing more is read
  CHECK(r.token_times().size() == 1);

  CompletionStreamReader not_object;
  CHECK_FALSE(not_object.feed("data: [1,2]\n\n", 1.0));
  CHECK(not_object.error_kind() == ErrorKind::MALFORMED);

  CompletionStreamReader no_choices;
  CHECK_FALSE(no_choices.feed("data: {\"id\":\"x\"}\n\n", 1.0));
  CHECK(no_choices.error_kind() == ErrorKind::MALFORMED);
}

TEST_CASE("stream reader: an error object inside a 200 stream is STREAM_ERROR with its message") {
  CompletionStreamReader r;
  CHECK_FALSE(r.feed("data: {\"error\":{\"message\":\"out of KV cache\",\"code\":500}}\n\n", 1.0));
  CHECK(r.error_kind() == ErrorKind::STREAM_ERROR);
  CHECK(r.error_message() == "out of KV cache");
}

TEST_CASE("stream reader: events after [DONE] are ignored") {
  CompletionStreamReader r;
  CHECK(r.feed("data: [DONE]\n\ndata: garbage\n\n", 1.0));
  CHECK(r.saw_done());
  CHECK(r.error_kind() == ErrorKind::NONE);
}

TEST_CASE("error bodies: the OpenAI message is extracted, anything else is shortened") {
  CHECK(error_message_from_body(R"({"error":{"message":"bad max_tokens","type":"invalid_request_error"}})") ==
        "bad max_tokens");
  CHECK(error_message_from_body(R"({"error":"plain"})") == "plain");
  CHECK(error_message_from_body(R"({"detail":"Not Found"})") == "Not Found");
  CHECK(error_message_from_body("line1\nline2") == "line1 line2");
  CHECK(error_message_from_body(std::string(500, 'x')).size() == 203);
}

TEST_CASE("error kinds have stable names") {
  CHECK(std::string(error_kind_name(ErrorKind::CONNECT)) == "connect");
  CHECK(std::string(error_kind_name(ErrorKind::HTTP_4XX)) == "http_4xx");
  CHECK(std::string(error_kind_name(ErrorKind::STREAM_CUT)) == "stream_cut");
  CHECK(std::string(error_kind_name(ErrorKind::CANCELLED)) == "cancelled");
}
