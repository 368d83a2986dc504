// pooled.cpp — role checks, context fitting and the engine round trip of the embedding
// and scoring routes.
#include "web/pooled.h"

#include <algorithm>

#include "engine/core/engine.h"
#include "engine/model/pooling.h"
#include "web/generation.h"
#include "web/http_error.h"
#include "web/openai_request.h"

namespace spark {
namespace {

const char* role_noun(const std::string& role) {
  return role == "embed" ? "an embedder" : role == "rerank" ? "a reranker" : "a chat model";
}

const char* role_routes(const std::string& role) {
  return role == "embed"    ? "POST /v1/embeddings"
         : role == "rerank" ? "POST /v1/rerank, /rerank and /v1/score"
                            : "the generation routes (chat completions, completions, responses, messages)";
}

}  // namespace

std::string pooled_role_message(const App& app) {
  const std::string& role = app.config.model.role;
  return "model '" + app.model_id + "' is served as " + role_noun(role) + " ([model] role = \"" + role +
         "\") and answers " + role_routes(role) + " only";
}

void require_role(const App& app, const char* role) {
  if (!app.engine || !app.tokenizer) throw HttpError(503, "the model is not loaded yet", "service_unavailable_error");
  if (app.config.model.role != role || !app.pooling) throw HttpError(400, pooled_role_message(app), "invalid_request_error", "model");
}

nlohmann::ordered_json pooled_request_body(const App& app, const std::string& body, const char* role) {
  require_role(app, role);
  nlohmann::ordered_json j = parse_json_body(body);
  check_model(j, app.model_id);
  return j;
}

void fit_context(const App& app, std::vector<std::vector<int32_t>>& inputs, int64_t truncate, const std::string& param) {
  const int64_t limit = app.engine->max_model_len();
  const int64_t keep = truncate < 0 ? limit : truncate;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& ids = inputs[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (ids.empty()) throw HttpError(400, where + " is empty: at least one token is needed", "invalid_request_error", where);
    if (truncate != 0 && int64_t(ids.size()) > keep) {
      // Never the pooled token: a last-token model keeps the end, a CLS one (an encoder) the
      // start and its closing token, as sentence-transformers' max_seq_length cuts.
      if (app.pooling->pooling != Pooling::CLS) ids.erase(ids.begin(), ids.end() - keep);
      else if (keep == 1) ids.resize(1);
      else ids.erase(ids.begin() + (keep - 1), ids.end() - 1);
    }
    if (int64_t(ids.size()) > limit)
      throw HttpError(400,
                      where + " has " + std::to_string(ids.size()) + " tokens, more than the model's context of " +
                          std::to_string(limit) + " tokens; shorten it or set truncate_prompt_tokens",
                      "invalid_request_error", where, "context_length_exceeded");
  }
}

PooledOutputs run_pooled(App& app, const std::string& id, const std::vector<std::vector<int32_t>>& inputs,
                         const ClientLink& client) {
  PooledOutputs out;
  out.hidden.resize(inputs.size());
  SamplingParams params;
  params.max_tokens = 1;
  // Waves of at most max_num_seqs: the engine runs no more at once, and a request of many
  // inputs then never meets the queue limit that turns whole requests away.
  const size_t wave = size_t(std::max<int64_t>(1, app.config.engine.max_num_seqs));
  for (size_t first = 0; first < inputs.size(); first += wave) {
    const size_t count = std::min(wave, inputs.size() - first);
    const std::vector<std::vector<int32_t>> part(inputs.begin() + std::ptrdiff_t(first),
                                                 inputs.begin() + std::ptrdiff_t(first + count));
    Generation gen(app, id + "-" + std::to_string(first), part, 1, params, client, /*last_hidden_state=*/true);
    for (;;) {
      std::vector<std::pair<size_t, RequestOutput>> outs;
      const Generation::Status status = gen.poll(outs, std::chrono::milliseconds(50));
      for (auto& [i, o] : outs) {
        if (!o.finished) continue;
        if (o.finish_reason == FinishReason::ABORT)
          throw HttpError(503, "input " + std::to_string(first + i) + " was aborted: the server is stopping",
                          "service_unavailable_error");
        if (o.finish_reason == FinishReason::ERROR || o.hidden.empty())
          throw HttpError(500, "input " + std::to_string(first + i) + " failed: " + (o.error.empty() ? "no result" : o.error),
                          "server_error");
        out.prompt_tokens += o.num_prompt_tokens;
        out.hidden[first + i] = std::move(o.hidden);
      }
      if (status == Generation::Status::DONE) break;
      if (status == Generation::Status::DISCONNECTED) throw HttpError(499, "the client closed the connection", "invalid_request_error");
      if (status == Generation::Status::TIMED_OUT)
        throw HttpError(408, "the request took longer than server.request_timeout_s and was cancelled", "timeout_error");
    }
  }
  return out;
}

}  // namespace spark
