// sse.h — Server-Sent Events as OpenAI streams them: `data: {json}\n\n` events ending with
// `data: [DONE]\n\n`, written through cpp-httplib's chunked content provider.
#pragma once
#include <memory>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace spark {

// One `data:` event.
std::string sse_event(const nlohmann::ordered_json& j);
// One `event: <name>` + `data:` event, as the Responses and Messages APIs frame theirs.
std::string sse_named_event(const std::string& name, const nlohmann::ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Produces a stream's bytes on the HTTP worker thread that writes them.
class SseProducer {
 public:
  virtual ~SseProducer() = default;
  // Waits briefly for more output and appends the events it makes to `out` (possibly
  // none). Returns false once the stream is complete; `out` then holds its last bytes.
  virtual bool produce(std::string& out) = 0;
  // The client is gone (a write failed or the connection closed): stop the work.
  virtual void abandon() = 0;
};

// Turns the response into an event stream fed by `producer`. `hold` (a drain token) lives
// until the stream ends, so a draining server waits for open streams.
void start_sse(const httplib::Request& req, httplib::Response& res, std::shared_ptr<SseProducer> producer,
               std::shared_ptr<void> hold);

}  // namespace spark
