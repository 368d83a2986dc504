// pooled.h — what the embedding and scoring routes share: checking that the served model
// is the kind they need, and running inputs through the engine for the final hidden
// state of each one's pooled token (prompt-only requests, batched by the engine like any
// prompts and keeping no KV once they finish, beyond what the prefix cache holds).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "web/app.h"
#include "web/client_link.h"

namespace spark {

// Why a model of the other kind refuses a route: "model 'x' is served as a reranker ...".
std::string pooled_role_message(const App& app);
// 503 while the model loads; 400 naming the served role when it is not `role`.
void require_role(const App& app, const char* role);
// A pooled route's body: require_role, then the JSON object with the checks every endpoint
// shares, its `model` checked against the served name.
nlohmann::ordered_json pooled_request_body(const App& app, const std::string& body, const char* role);

// Inputs longer than the context: a 400 naming `param`[index], or, with truncate > 0, cut to
// `truncate` tokens (vLLM's truncate_prompt_tokens; -1: the context's length): the last ones
// for a last-token model, the first ones and the closing token for a CLS-pooled encoder.
void fit_context(const App& app, std::vector<std::vector<int32_t>>& inputs, int64_t truncate, const std::string& param);

struct PooledOutputs {
  std::vector<std::vector<float>> hidden;  // [input][hidden_size]
  int64_t prompt_tokens = 0;
};

// Runs every input (each checked by fit_context first), at most engine.max_num_seqs at a
// time, waiting while the client stays and the request deadline holds. Throws HttpError
// when the engine refuses or fails an input (naming it), the client leaves or time runs out.
PooledOutputs run_pooled(App& app, const std::string& id, const std::vector<std::vector<int32_t>>& inputs,
                         const ClientLink& client);

}  // namespace spark
