// embeddings.cpp — POST /v1/embeddings: `input` as a string, strings, token ids or lists of
// token ids; each input pooled by the model (engine/model/pooling.h), cut to `dimensions`
// when asked, and written as floats or as base64 of little-endian f32 (what the openai SDK
// asks for by default and decodes).
#include "web/openai/embeddings.h"

#include <bit>
#include <cstring>

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

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit on inputs in one request

std::string base64_f32(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian f32");
  std::string bytes(v.size() * 4, '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

int64_t integer_field(const J& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const J* v = json_field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    bad_request(name, std::string("'") + name + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v->get<int64_t>();
}

// The inputs as token ids, in order.
std::vector<std::vector<int32_t>> read_inputs(const App& app, const J& body) {
  const J* input = json_field(body, "input");
  if (!input) bad_request("input", "'input' is required: a string, an array of strings, or token ids");
  const bool special = field_bool(body, "add_special_tokens", true);
  const auto text = [&](const J& s, const std::string& where) {
    const std::string t = s.get<std::string>();
    if (t.empty()) bad_request("input", where + " is an empty string");
    return app.tokenizer->encode(t, special, /*parse_special=*/true);
  };
  std::vector<std::vector<int32_t>> out;
  if (input->is_string()) {
    out.push_back(text(*input, "'input'"));
    return out;
  }
  if (!input->is_array() || input->empty())
    bad_request("input", "'input' must be a non-empty string, array of strings, array of token ids, or array of such arrays");
  if ((*input)[0].is_number()) {
    out.push_back(field_token_ids(*input, "input", app.engine->vocab_size()));
    return out;
  }
  if (input->size() > kMaxInputs)
    bad_request("input", "'input' holds at most " + std::to_string(kMaxInputs) + " items, got " + std::to_string(input->size()));
  const bool strings = (*input)[0].is_string();
  for (size_t i = 0; i < input->size(); ++i) {
    const J& item = (*input)[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (strings && item.is_string()) out.push_back(text(item, where));
    else if (!strings && item.is_array() && !item.empty()) out.push_back(field_token_ids(item, where, app.engine->vocab_size()));
    else bad_request("input", where + ": 'input' must be all strings or all non-empty token-id arrays");
  }
  return out;
}

}  // namespace

void handle_embeddings(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  const J body = pooled_request_body(app, req.body, "embed");
  const PoolingModel& model = *app.pooling;
  std::string format = "float";
  if (const J* f = json_field(body, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    format = f->get<std::string>();
  }
  const int64_t dimensions = integer_field(body, "dimensions", 1, model.hidden_size, 0);
  const int64_t truncate = integer_field(body, "truncate_prompt_tokens", -1, app.engine->max_model_len(), 0);
  if (const J* u = json_field(body, "user"); u && !u->is_string()) bad_request("user", "'user' must be a string");
  std::vector<std::vector<int32_t>> inputs = read_inputs(app, body);
  fit_context(app, inputs, truncate, "input");

  ConnectionWatch client(req);
  const PooledOutputs pooled = run_pooled(app, random_id("embd-"), inputs, client);
  J data = J::array();
  for (size_t i = 0; i < pooled.hidden.size(); ++i) {
    const std::vector<float> v = embedding_of(model, pooled.hidden[i], dimensions);
    J item = J::object();
    item["object"] = "embedding";
    item["index"] = i;
    if (format == "base64") item["embedding"] = base64_f32(v);
    else item["embedding"] = v;
    data.push_back(std::move(item));
  }
  J out = J::object();
  out["object"] = "list";
  out["data"] = std::move(data);
  out["model"] = app.model_id;
  out["usage"] = J{{"prompt_tokens", pooled.prompt_tokens}, {"total_tokens", pooled.prompt_tokens}};
  send_json(res, 200, dump_json(out));
}

}  // namespace spark
