// openai_request.h — parsing and validation of /v1/chat/completions and /v1/completions
// bodies into what the engine runs. Every field is type- and range-checked; a bad one is
// an HttpError (400, or 404 for an unknown model) naming the field in `param`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/step/sampling_params.h"

namespace spark {

enum class ApiKind { CHAT, COMPLETION };

enum class ToolChoice { NONE, AUTO, REQUIRED, NAMED };

// Bounds that keep one request from exhausting the server (documented in the README).
inline constexpr int64_t kMaxChoices = 16;          // n
inline constexpr size_t kMaxApiStopStrings = 16;    // stop
inline constexpr size_t kMaxPrompts = 64;           // prompts in one /v1/completions call
inline constexpr size_t kMaxSequencesPerRequest = 128;  // prompts x n
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxJsonDepth = 64;          // nesting of the request body
inline constexpr size_t kMaxMessages = 4096;

struct ApiRequest {
  ApiKind kind = ApiKind::CHAT;
  std::string model;  // as asked ("" = the served model)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int64_t n = 1;
  SamplingParams params;

  // Chat: messages normalized for the chat template (content parts joined, tool-call
  // arguments decoded to objects as transformers expects them).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null when none were given
  ToolChoice tool_choice = ToolChoice::AUTO;
  std::string tool_name;         // ToolChoice::NAMED
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;

  // Structured output asked for (response_format, structured_outputs, guided_*), and the
  // field that asked, for errors.
  std::optional<constrain::ConstraintSpec> structured;
  std::string structured_param;

  // Completions: each prompt is text or token ids (exactly one of the two is used).
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  bool echo = false;
  // Legacy completions logprobs: top alternatives per token; -1 = no logprobs.
  int32_t completion_logprobs = -1;
  bool add_special_tokens = true;  // completions: BOS as the tokenizer adds it

  size_t num_prompts() const { return kind == ApiKind::CHAT ? 1 : prompt_texts.size() + prompt_ids.size(); }
};

// Parses a body. `vocab_size` bounds token ids (prompt, logit_bias, stop_token_ids);
// `model_id` is the served model name.
ApiRequest parse_api_request(std::string_view body, ApiKind kind, int64_t vocab_size, const std::string& model_id);
// The same for a body already parsed (the Responses and Messages APIs convert theirs to a
// chat completions body first, so every field is checked by one parser).
ApiRequest parse_api_body(const nlohmann::ordered_json& body, ApiKind kind, int64_t vocab_size,
                          const std::string& model_id);

// The JSON object of a body with the checks every endpoint shares (valid UTF-8 JSON,
// nesting depth, an object at the top).
nlohmann::ordered_json parse_json_body(std::string_view body);

// Typed field access shared by the other JSON endpoints (/tokenize, /detokenize). A
// null field counts as absent. Each throws HttpError 400 naming the field.
bool field_bool(const nlohmann::ordered_json& body, const char* name, bool fallback);
std::vector<int32_t> field_token_ids(const nlohmann::ordered_json& value, const std::string& param, int64_t vocab_size);
// A field of an object, or null when it is absent or JSON null (null counts as absent).
const nlohmann::ordered_json* json_field(const nlohmann::ordered_json& body, const char* name);
// Throws HttpError 400 (invalid_request_error) naming `param`.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);
// Checks `model` against the served id (absent = the served model): 404 model_not_found.
void check_model(const nlohmann::ordered_json& body, const std::string& model_id);

}  // namespace spark
