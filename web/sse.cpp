// sse.cpp — SSE framing and the content provider that drives a producer.
#include "web/sse.h"

#include "web/openai_response.h"

namespace spark {

std::string sse_event(const nlohmann::ordered_json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_named_event(const std::string& name, const nlohmann::ordered_json& j) {
  return "event: " + name + "\n" + sse_event(j);
}

void start_sse(const httplib::Request& req, httplib::Response& res, std::shared_ptr<SseProducer> producer,
               std::shared_ptr<void> hold) {
  // cpp-httplib gzips any text/* body the client accepts gzip for, and its compressor holds
  // data back until the end: events would arrive all at once. The request object is the
  // server's own (not const), so dropping the header here makes this response plain.
  const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies must not hold events back
  res.set_chunked_content_provider(
      "text/event-stream",
      [producer, hold](size_t, httplib::DataSink& sink) {
        std::string out;
        bool more = producer->produce(out);
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          producer->abandon();
          return false;
        }
        if (!more) sink.done();
        return true;
      },
      [producer](bool success) {
        if (!success) producer->abandon();
      });
}

}  // namespace spark
