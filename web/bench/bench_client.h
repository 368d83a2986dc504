// bench_client.h — the HTTP side of the benchmark: one keep-alive connection per client,
// model discovery, token counting, and one streamed completion request measured into a
// RequestRecord with its error kind.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "web/bench/bench_options.h"
#include "web/bench/bench_prompts.h"
#include "web/bench/bench_stats.h"

namespace httplib {
class Client;
}

namespace spark {

// Where requests go: "http://host:port" plus the URL's path (without a trailing /v1),
// so that a server mounted under a prefix works too.
struct BenchTarget {
  std::string origin;     // scheme://host[:port]
  std::string base_path;  // "" or "/prefix"
  std::string api_key;
  double timeout_s = 600;
};
// Throws InputError for a URL that is not http(s)://host[:port][/path].
BenchTarget parse_target(const std::string& url, const std::string& api_key, double timeout_s);

// The JSON body of one streamed request: max_tokens, ignore_eos (a vLLM extension that
// other servers ignore) so the output length is what was asked, temperature 0, and
// stream_options.include_usage so the server reports exact token counts.
nlohmann::json request_body(BenchEndpoint endpoint, const std::string& model, const BenchPrompt& prompt,
                            long long max_tokens);

class BenchClient {
 public:
  explicit BenchClient(const BenchTarget& target);
  ~BenchClient();
  BenchClient(const BenchClient&) = delete;
  BenchClient& operator=(const BenchClient&) = delete;

  // The first model id of GET /v1/models; throws RuntimeError saying why there is none.
  std::string first_model();
  // The server's token count for `text` via POST /tokenize (vLLM and sparkd:
  // {"prompt"} -> {"count"}; llama.cpp: {"content"} -> {"tokens"}); nullopt when the
  // server has neither. The first call finds out which one answers.
  std::optional<long long> count_tokens(const std::string& model, const std::string& text);
  // Sends one streamed request and measures it. `cancel` is polled as data arrives;
  // interrupt() from another thread ends a blocking wait at once.
  RequestRecord stream(BenchEndpoint endpoint, const std::string& body, const std::atomic<bool>& cancel);
  // GET /metrics as text; "" when the server has none.
  std::string metrics_text();
  void interrupt();

 private:
  enum class TokenizeStyle { UNKNOWN, PROMPT, CONTENT, NONE };
  std::optional<long long> try_tokenize(const nlohmann::json& body, bool count_field);
  BenchTarget target_;
  std::unique_ptr<httplib::Client> http_;
  TokenizeStyle tokenize_style_ = TokenizeStyle::UNKNOWN;
};

// One client per worker thread, created on first use; interrupt_all() reaches every one.
class BenchClientPool {
 public:
  BenchClientPool(const BenchTarget& target, size_t size) : target_(target), clients_(size) {}
  BenchClient& get(size_t worker);
  void interrupt_all();

 private:
  BenchTarget target_;
  std::mutex mu_;
  std::vector<std::unique_ptr<BenchClient>> clients_;
};

}  // namespace spark
