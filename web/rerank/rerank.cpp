// rerank.cpp — query-document pairs rendered into the reranker's own prompt
// (PoolingModel::rerank_prompt), or a cross-encoder's tokenizer pair, run for their pooled
// state and scored by its head.
#include "web/rerank/rerank.h"

#include <algorithm>
#include <ctime>
#include <numeric>

#include "engine/core/engine.h"
#include "engine/model/pooling.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/connection.h"
#include "web/openai_request.h"
#include "web/openai_response.h"
#include "web/pooled.h"
#include "web/server.h"
#include "web/turn.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

constexpr size_t kMaxDocuments = 2048;

std::string text_field(const J& body, const char* name) {
  const J* v = json_field(body, name);
  if (!v) bad_request(name, std::string("'") + name + "' is required");
  if (!v->is_string()) bad_request(name, std::string("'") + name + "' must be a string");
  return v->get<std::string>();
}

// A document as a string or as {"text": ...} (Cohere's and Jina's object form).
std::string document_text(const J& d, const std::string& where) {
  if (d.is_string()) return d.get<std::string>();
  if (d.is_object() && d.contains("text") && d["text"].is_string()) return d["text"].get<std::string>();
  bad_request(where, where + " must be a string or an object with a string 'text'");
}

std::vector<std::string> text_list(const J& v, const std::string& param) {
  std::vector<std::string> out;
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || v.empty()) bad_request(param, "'" + param + "' must be a string or a non-empty array of them");
  if (v.size() > kMaxDocuments)
    bad_request(param, "'" + param + "' holds at most " + std::to_string(kMaxDocuments) + " items, got " + std::to_string(v.size()));
  for (size_t i = 0; i < v.size(); ++i) out.push_back(document_text(v[i], param + "[" + std::to_string(i) + "]"));
  return out;
}

int64_t truncate_field(const App& app, const J& body) {
  const J* v = json_field(body, "truncate_prompt_tokens");
  if (!v) return 0;
  const int64_t limit = app.engine->max_model_len();
  if (!v->is_number_integer() || v->get<int64_t>() < -1 || v->get<int64_t>() > limit)
    bad_request("truncate_prompt_tokens", "'truncate_prompt_tokens' must be an integer in [-1, " + std::to_string(limit) + "]");
  return v->get<int64_t>();
}

struct Scored {
  std::vector<float> scores;
  int64_t prompt_tokens = 0;
};

// Scores each (queries[i or 0], documents[i]) pair.
Scored score_pairs(App& app, const httplib::Request& req, const std::vector<std::string>& queries,
                   const std::vector<std::string>& documents, const std::string& instruction, int64_t truncate,
                   const char* param) {
  const PoolingModel& model = *app.pooling;
  std::vector<std::vector<int32_t>> inputs;
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::string& q = queries.size() == 1 ? queries[0] : queries[i];
    inputs.push_back(model.pair_input ? app.tokenizer->encode_pair(q, documents[i])
                                      : app.tokenizer->encode(model.rerank_prompt(q, documents[i], instruction), true,
                                                              /*parse_special=*/true));
  }
  fit_context(app, inputs, truncate, param);
  ConnectionWatch client(req);
  PooledOutputs pooled = run_pooled(app, random_id("rerank-"), inputs, client);
  Scored out;
  out.prompt_tokens = pooled.prompt_tokens;
  for (const auto& h : pooled.hidden) out.scores.push_back(model.score(h));
  return out;
}

std::string instruction_field(const J& body) {
  const J* v = json_field(body, "instruction");
  if (!v) return "";
  if (!v->is_string()) bad_request("instruction", "'instruction' must be a string");
  return v->get<std::string>();
}

}  // namespace

void handle_rerank(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  const J body = pooled_request_body(app, req.body, "rerank");
  const std::string query = text_field(body, "query");
  const J* docs = json_field(body, "documents");
  if (!docs) bad_request("documents", "'documents' is required");
  if (!docs->is_array() || docs->empty()) bad_request("documents", "'documents' must be a non-empty array");
  const std::vector<std::string> documents = text_list(*docs, "documents");
  int64_t top_n = int64_t(documents.size());
  if (const J* v = json_field(body, "top_n")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) bad_request("top_n", "'top_n' must be a non-negative integer");
    if (v->get<int64_t>() > 0) top_n = std::min<int64_t>(top_n, v->get<int64_t>());  // 0: all, as vLLM
  }
  const bool return_documents = field_bool(body, "return_documents", true);
  const Scored scored =
      score_pairs(app, req, {query}, documents, instruction_field(body), truncate_field(app, body), "documents");

  std::vector<size_t> order(documents.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scored.scores[a] > scored.scores[b]; });
  J results = J::array();
  for (size_t k = 0; k < size_t(top_n); ++k) {
    J r = J::object();
    r["index"] = order[k];
    if (return_documents) r["document"] = J{{"text", documents[order[k]]}};
    r["relevance_score"] = scored.scores[order[k]];
    results.push_back(std::move(r));
  }
  J out = J::object();
  out["id"] = random_id("rerank-");
  out["model"] = app.model_id;
  out["usage"] = J{{"prompt_tokens", scored.prompt_tokens}, {"total_tokens", scored.prompt_tokens}};
  out["results"] = std::move(results);
  send_json(res, 200, dump_json(out));
}

void handle_score(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  const J body = pooled_request_body(app, req.body, "rerank");
  const J* t1 = json_field(body, "text_1");
  const J* t2 = json_field(body, "text_2");
  if (!t1) bad_request("text_1", "'text_1' is required");
  if (!t2) bad_request("text_2", "'text_2' is required");
  const std::vector<std::string> queries = text_list(*t1, "text_1");
  std::vector<std::string> documents = text_list(*t2, "text_2");
  if (queries.size() > 1 && documents.size() == 1) documents.assign(queries.size(), documents[0]);
  if (queries.size() > 1 && queries.size() != documents.size())
    bad_request("text_2", "'text_1' has " + std::to_string(queries.size()) + " items and 'text_2' " +
                              std::to_string(documents.size()) + "; give one of them one item, or both the same count");
  const Scored scored = score_pairs(app, req, queries, documents, instruction_field(body), truncate_field(app, body), "text_2");
  J data = J::array();
  for (size_t i = 0; i < scored.scores.size(); ++i) data.push_back(J{{"index", i}, {"object", "score"}, {"score", scored.scores[i]}});
  J out = J::object();
  out["id"] = random_id("score-");
  out["object"] = "list";
  out["created"] = std::time(nullptr);
  out["model"] = app.model_id;
  out["data"] = std::move(data);
  out["usage"] = J{{"prompt_tokens", scored.prompt_tokens}, {"total_tokens", scored.prompt_tokens}};
  send_json(res, 200, dump_json(out));
}

}  // namespace spark
