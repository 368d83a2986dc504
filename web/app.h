// app.h — what the HTTP handlers share: the config, the serving state, and the model parts.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include <memory>

#include "engine/config.h"
#include "web/chat_format/chat_format.h"
#include "web/openai/response_store.h"
#include "web/request_log.h"
#include "web/server_state.h"

namespace spark {

class HttpServer;
class Engine;
class Tokenizer;
class ChatTemplate;
class PeerHead;
struct PoolingModel;

struct App {
  const Config& config;
  ServerState& state;
  HttpServer& http;
  std::string model_id;  // the served model name

  // Set by serve once the model is loaded, before the status turns READY (handlers that
  // run while loading see nulls and answer 503).
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null when the model ships none
  const PeerHead* peer = nullptr;               // peer mode, head: the pair's state
  // How this model writes tool calls (web/chat_format/), read from its chat template.
  const ChatFormat* chat_format = &default_chat_format();
  bool thinking_model = false;  // its template knows <think> (or Gemma 4's thought channel)
  bool thinks_unasked = false;  // and thinks when the request does not say enable_thinking
  // An embedder's or reranker's pooling and score head ([model] role); null for a chat
  // model, which answers only the generation routes, as these models answer only theirs.
  const PoolingModel* pooling = nullptr;
  int64_t created = 0;          // unix time the model was loaded

  // Engine sequences submitted by the API and not yet finished: the admission count
  // that turns into 429 past engine.max_num_seqs + server.max_queued_requests.
  std::atomic<int64_t> sequences_in_flight{0};

  // What the dashboard shows about the box, filled by serve with the model.
  std::string backend_description{};  // Backend::describe(): "cpu (8 threads)", "cuda (NVIDIA H100)"
  uint64_t weight_bytes = 0;        // weights this process holds
  uint64_t kv_cache_bytes = 0;      // the paged KV cache as allocated
  uint64_t state_bytes = 0;         // recurrent layers' state slots (hybrid models), as allocated
  RequestLog requests{};              // recent requests, fed by the API handlers
  ResponseStore responses{};          // /v1/responses kept for previous_response_id
  // The dashboard's stats sampler; owned here so it stops before the state it reads goes.
  std::shared_ptr<void> dashboard{};
};

}  // namespace spark
