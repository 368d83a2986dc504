// openai_request.cpp — typed field readers and the chat / completion request parsers.
#include "web/openai_request.h"

#include <charconv>
#include <cstdio>
#include <cmath>
#include <limits>

#include "web/chat_format/json_call.h"
#include "web/http_error.h"
#include "web/structured_output.h"

namespace spark {

void bad_request(const std::string& param, const std::string& message) {
  throw HttpError(400, message, "invalid_request_error", param);
}

const nlohmann::ordered_json* json_field(const nlohmann::ordered_json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

using J = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { bad_request(param, message); }

const J* field(const J& body, const char* name) { return json_field(body, name); }

std::string show(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double as_number(const J& v, const std::string& param) {
  if (!v.is_number()) bad(param, "'" + param + "' must be a number, got " + std::string(v.type_name()));
  double d = v.get<double>();
  if (!std::isfinite(d)) bad(param, "'" + param + "' must be a finite number, got " + show(d));
  return d;
}

int64_t as_integer(const J& v, const std::string& param, int64_t lo, int64_t hi) {
  int64_t out = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(param, "'" + param + "' must be at most " + std::to_string(hi) + ", got " + v.dump());
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      bad(param, "'" + param + "' must be an integer, got " + show(d));
    out = static_cast<int64_t>(d);
  } else {
    bad(param, "'" + param + "' must be an integer, got " + std::string(v.type_name()));
  }
  if (out < lo || out > hi)
    bad(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                   std::to_string(out));
  return out;
}

double number_in(const J& body, const char* name, double lo, double hi, double fallback, bool lo_open = false) {
  const J* v = field(body, name);
  if (!v) return fallback;
  double d = as_number(*v, name);
  if (d < lo || d > hi || (lo_open && d == lo))
    bad(name, "'" + std::string(name) + "' must be in " + (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) + "], got " +
                  show(d));
  return d;
}

std::string as_string(const J& v, const std::string& param) {
  if (!v.is_string()) bad(param, "'" + param + "' must be a string, got " + std::string(v.type_name()));
  return v.get<std::string>();
}

// A string field inside messages: the error names the path and carries param "messages".
std::string message_string(const J& v, const std::string& where) {
  if (!v.is_string()) bad("messages", "'" + where + "' must be a string, got " + std::string(v.type_name()));
  return v.get<std::string>();
}

std::vector<std::string> parse_stop(const J& v) {
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxApiStopStrings)
      bad("stop", "'stop' holds at most " + std::to_string(kMaxApiStopStrings) + " strings, got " +
                      std::to_string(v.size()));
    for (const auto& s : v) stops.push_back(as_string(s, "stop"));
  } else {
    bad("stop", "'stop' must be a string or an array of strings, got " + std::string(v.type_name()));
  }
  for (const auto& s : stops) {
    if (s.empty()) bad("stop", "stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes)
      bad("stop", "a stop string is at most " + std::to_string(kMaxStopStringBytes) + " bytes, got " +
                      std::to_string(s.size()));
  }
  return stops;
}

std::unordered_map<int32_t, float> parse_logit_bias(const J& v, int64_t vocab_size) {
  if (!v.is_object()) bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (v.size() > kMaxLogitBias)
    bad("logit_bias", "'logit_bias' holds at most " + std::to_string(kMaxLogitBias) + " entries, got " +
                          std::to_string(v.size()));
  std::unordered_map<int32_t, float> bias;
  for (const auto& [key, value] : v.items()) {
    int64_t id = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size())
      bad("logit_bias", "logit_bias key '" + key + "' is not a token id");
    if (id < 0 || id >= vocab_size)
      bad("logit_bias", "logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")");
    double b = as_number(value, "logit_bias");
    if (b < -100 || b > 100) bad("logit_bias", "logit_bias values must be in [-100, 100], got " + show(b));
    bias[static_cast<int32_t>(id)] = static_cast<float>(b);
  }
  return bias;
}

// The sampling fields both endpoints share.
void parse_sampling(const J& body, ApiRequest& r, int64_t vocab_size) {
  SamplingParams& p = r.params;
  p.temperature = number_in(body, "temperature", 0, 2, 1.0);
  // The sampler needs a temperature of at least 0.01; below it the distribution is
  // already one-hot for every practical purpose.
  if (p.temperature > 0 && p.temperature < 0.01) p.temperature = 0.01;
  p.top_p = number_in(body, "top_p", 0, 1, 1.0, /*lo_open=*/true);
  if (const J* v = field(body, "top_k")) p.top_k = static_cast<int32_t>(as_integer(*v, "top_k", -1, 1 << 30));
  p.min_p = number_in(body, "min_p", 0, 1, 0.0);
  p.presence_penalty = number_in(body, "presence_penalty", -2, 2, 0.0);
  p.frequency_penalty = number_in(body, "frequency_penalty", -2, 2, 0.0);
  p.repetition_penalty = number_in(body, "repetition_penalty", 0, 10, 1.0, /*lo_open=*/true);
  if (const J* v = field(body, "seed")) {
    if (v->is_number_unsigned()) p.seed = v->get<uint64_t>();
    else p.seed = static_cast<uint64_t>(as_integer(*v, "seed", std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::max()));
  }
  const int64_t kMaxTokensCap = int64_t(1) << 31;
  if (const J* v = field(body, "max_tokens")) p.max_tokens = as_integer(*v, "max_tokens", 1, kMaxTokensCap);
  if (const J* v = field(body, "max_completion_tokens"))
    p.max_tokens = as_integer(*v, "max_completion_tokens", 1, kMaxTokensCap);
  if (const J* v = field(body, "min_tokens")) p.min_tokens = as_integer(*v, "min_tokens", 0, kMaxTokensCap);
  if (p.max_tokens && p.min_tokens > *p.max_tokens)
    bad("min_tokens", "'min_tokens' (" + std::to_string(p.min_tokens) + ") must not exceed max_tokens (" +
                          std::to_string(*p.max_tokens) + ")");
  if (const J* v = field(body, "stop")) p.stop = parse_stop(*v);
  if (const J* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    if (v->size() > kMaxStopTokenIds) bad("stop_token_ids", "'stop_token_ids' holds too many ids");
    p.stop_token_ids = field_token_ids(*v, "stop_token_ids", vocab_size);
  }
  if (const J* v = field(body, "logit_bias")) p.logit_bias = parse_logit_bias(*v, vocab_size);
  p.ignore_eos = field_bool(body, "ignore_eos", false);
  p.skip_special_tokens = field_bool(body, "skip_special_tokens", true);
  p.speculative = field_bool(body, "speculative", true);

  r.n = field(body, "n") ? as_integer(body["n"], "n", 1, kMaxChoices) : 1;
  if (const J* v = field(body, "best_of")) {
    int64_t best_of = as_integer(*v, "best_of", 1, kMaxChoices);
    if (best_of != r.n) bad("best_of", "'best_of' other than n is not supported");
  }
  r.stream = field_bool(body, "stream", false);
  if (const J* v = field(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = field_bool(*v, "include_usage", false);
  }
  if (const J* v = field(body, "user")) as_string(*v, "user");
  r.structured = parse_structured_output(body, r.structured_param);
}

// Content as the template sees it, normalised as vLLM's chat_utils does for templates that
// take a string: null or missing is "", text parts are joined with newlines (parts whose
// text is null are skipped; input_text, output_text and refusal parts are text too).
// Errors name the message field path and carry param "messages", as every message error does.
std::string part_text(const J* content, const std::string& where) {
  if (!content) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) bad("messages", "'" + where + "' must be a string, null or an array of content parts");
  std::string text;
  bool first = true;
  for (size_t i = 0; i < content->size(); ++i) {
    const J& part = (*content)[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad("messages", at + " must be an object with a string 'type'");
    std::string type = part["type"].get<std::string>();
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "text" && type != "input_text" && type != "output_text" && type != "refusal")
      bad("messages", at + ": content part type '" + type + "' is not supported: this model takes text only");
    const J* value = field(part, key);
    if (!value) continue;
    if (!value->is_string()) bad("messages", at + "." + key + " must be a string");
    if (!first) text += "\n";
    text += value->get<std::string>();
    first = false;
  }
  return text;
}

J parse_tool_calls_of(const J& calls, const std::string& param) {
  if (!calls.is_array()) bad("messages", "'" + param + "' must be an array");
  J out = J::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const J& c = calls[i];
    std::string where = param + "[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad("messages", where + " must be an object with a 'function' object");
    const J& fn = c["function"];
    J call = J::object();
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
    call["type"] = "function";
    J f = J::object();
    f["name"] = message_string(fn.contains("name") ? fn["name"] : J(), where + ".function.name");
    // Templates print arguments with tojson, as transformers gets them: as objects. As in
    // vLLM, arguments that are not JSON (or absent) become {}.
    J args = fn.contains("arguments") ? fn["arguments"] : J::object();
    if (args.is_string()) {
      J parsed = J::parse(args.get<std::string>(), nullptr, false);
      args = parsed.is_discarded() ? J::object() : std::move(parsed);
    } else if (!args.is_object() && !args.is_array()) {
      args = J::object();
    }
    f["arguments"] = std::move(args);
    call["function"] = std::move(f);
    out.push_back(std::move(call));
  }
  return out;
}

J parse_messages(const J& body) {
  const J* msgs = field(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array()) bad("messages", "'messages' must be an array");
  if (msgs->empty()) bad("messages", "'messages' must hold at least one message");
  if (msgs->size() > kMaxMessages) bad("messages", "'messages' holds at most " + std::to_string(kMaxMessages) + " messages");
  J out = J::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const J& m = (*msgs)[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad("messages", where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad("messages", where + " needs a string 'role'");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad("messages", where + ".role must be system, developer, user, assistant or tool, got '" + role + "'");
    J msg = J::object();
    msg["role"] = role;
    msg["content"] = part_text(field(m, "content"), where + ".content");
    if (const J* v = field(m, "name")) msg["name"] = message_string(*v, where + ".name");
    if (const J* v = field(m, "tool_call_id")) msg["tool_call_id"] = message_string(*v, where + ".tool_call_id");
    // vLLM names it `reasoning`; clients written for DeepSeek send `reasoning_content`.
    if (const J* v = field(m, "reasoning_content")) msg["reasoning_content"] = message_string(*v, where + ".reasoning_content");
    else if (const J* r = field(m, "reasoning")) msg["reasoning_content"] = message_string(*r, where + ".reasoning");
    if (const J* v = field(m, "tool_calls")) {
      if (role != "assistant") bad("messages", where + ": only assistant messages carry tool_calls");
      // An empty list is dropped, as vLLM does, so templates take the plain assistant path.
      J calls = parse_tool_calls_of(*v, where + ".tool_calls");
      if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_tools(const J& body, ApiRequest& r) {
  std::vector<std::string> names;
  if (const J* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "'tools' must be an array");
    if (tools->size() > kMaxTools) bad("tools", "'tools' holds at most " + std::to_string(kMaxTools) + " tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const J& t = (*tools)[i];
      std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
        bad("tools", where + " must be {\"type\": \"function\", \"function\": {...}}");
      if (t.contains("type") && t["type"] != "function") bad("tools", where + ".type must be 'function'");
      const J& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string()) bad("tools", where + ".function.name must be a string");
      std::string name = fn["name"].get<std::string>();
      if (name.empty() || name.size() > 64) bad("tools", where + ".function.name must be 1 to 64 characters");
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
        bad("tools", where + ".function.parameters must be a JSON Schema object");
      names.push_back(name);
    }
    if (!tools->empty()) r.tools = *tools;
  }
  const J* choice = field(body, "tool_choice");
  r.tool_choice = r.tools.is_null() ? ToolChoice::NONE : ToolChoice::AUTO;
  if (!choice) return;
  if (choice->is_string()) {
    std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice = ToolChoice::NONE;
    else if (c == "auto") r.tool_choice = r.tools.is_null() ? ToolChoice::NONE : ToolChoice::AUTO;
    else if (c == "required") r.tool_choice = ToolChoice::REQUIRED;
    else bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}, got '" + c + "'");
  } else if (choice->is_object()) {
    const J* fn = field(*choice, "function");
    if (!fn || !fn->is_object() || !fn->contains("name"))
      bad("tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    if (!(*fn)["name"].is_string()) bad("tool_choice", "tool_choice.function.name must be a string");
    r.tool_name = (*fn)["name"].get<std::string>();
    r.tool_choice = ToolChoice::NAMED;
    if (std::find(names.begin(), names.end(), r.tool_name) == names.end())
      bad("tool_choice", "tool_choice names '" + r.tool_name + "', which is not among 'tools'");
  } else {
    bad("tool_choice", "'tool_choice' must be a string or an object");
  }
  if ((r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED) && r.tools.is_null())
    bad("tool_choice", "'tool_choice' requires 'tools'");
}

void parse_prompt(const J& body, ApiRequest& r, int64_t vocab_size) {
  const J* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    r.prompt_texts.push_back(prompt->get<std::string>());
    return;
  }
  if (!prompt->is_array()) bad("prompt", "'prompt' must be a string, an array of strings, or token ids");
  if (prompt->empty()) bad("prompt", "'prompt' must not be an empty array");
  if ((*prompt)[0].is_number()) {
    r.prompt_ids.push_back(field_token_ids(*prompt, "prompt", vocab_size));
    return;
  }
  if (prompt->size() > kMaxPrompts)
    bad("prompt", "'prompt' holds at most " + std::to_string(kMaxPrompts) + " prompts, got " + std::to_string(prompt->size()));
  bool strings = (*prompt)[0].is_string();
  for (const J& p : *prompt) {
    if (strings && p.is_string()) r.prompt_texts.push_back(p.get<std::string>());
    else if (!strings && p.is_array()) r.prompt_ids.push_back(field_token_ids(p, "prompt", vocab_size));
    else bad("prompt", "'prompt' must be all strings or all token-id arrays");
  }
}

}  // namespace

J parse_json_body(std::string_view body) {
  if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    bad("", "the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  J j = J::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the position and reason; only bodies that failed pay for it.
    try {
      J again = J::parse(body);
      (void)again;
    } catch (const J::exception& e) {
      bad("", std::string("the request body is not valid JSON: ") + e.what());
    }
    bad("", "the request body is not valid JSON");
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  return j;
}

bool field_bool(const J& body, const char* name, bool fallback) {
  const J* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, "'" + std::string(name) + "' must be true or false, got " + std::string(v->type_name()));
  return v->get<bool>();
}

std::vector<int32_t> field_token_ids(const J& value, const std::string& param, int64_t vocab_size) {
  if (!value.is_array()) bad(param, "'" + param + "' must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const J& v = value[i];
    if (!v.is_number_integer())
      bad(param, "'" + param + "' must hold integer token ids; position " + std::to_string(i) + " is " +
                     std::string(v.type_name()));
    bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    uint64_t id = negative ? 0 : v.get<uint64_t>();
    if (negative || id >= uint64_t(vocab_size))
      bad(param, "token id " + v.dump() + " at position " + std::to_string(i) + " of '" + param +
                     "' is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

void check_model(const J& body, const std::string& model_id) {
  const J* v = field(body, "model");
  if (!v) return;
  std::string model = as_string(*v, "model");
  // A GGUF's file name (the served id plus ".gguf") names the same model.
  if (model != model_id && model != model_id + ".gguf")
    throw HttpError(404, "The model '" + model + "' does not exist; this server serves '" + model_id + "'",
                    "invalid_request_error", "model", "model_not_found");
}

ApiRequest parse_api_request(std::string_view body_text, ApiKind kind, int64_t vocab_size, const std::string& model_id) {
  return parse_api_body(parse_json_body(body_text), kind, vocab_size, model_id);
}

ApiRequest parse_api_body(const J& body, ApiKind kind, int64_t vocab_size, const std::string& model_id) {
  ApiRequest r;
  r.kind = kind;
  check_model(body, model_id);
  r.model = model_id;
  parse_sampling(body, r, vocab_size);
  if (kind == ApiKind::CHAT) {
    r.messages = parse_messages(body);
    parse_tools(body, r);
    if (const J* v = field(body, "logprobs")) {
      if (!v->is_boolean()) bad("logprobs", "'logprobs' must be true or false for chat completions");
      r.params.logprobs = v->get<bool>();
    }
    if (const J* v = field(body, "top_logprobs")) {
      r.params.top_logprobs = static_cast<int32_t>(as_integer(*v, "top_logprobs", 0, kMaxTopLogprobs));
      if (r.params.top_logprobs > 0 && !r.params.logprobs)
        bad("top_logprobs", "'top_logprobs' needs 'logprobs' to be true");
    }
    if (const J* v = field(body, "chat_template_kwargs")) {
      if (!v->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.template_kwargs = *v;
    }
    // OpenAI's reasoning effort reaches templates that read it (gpt-oss's harmony system message).
    if (const J* v = field(body, "reasoning_effort")) {
      const std::string e = as_string(*v, "reasoning_effort");
      if (e != "low" && e != "medium" && e != "high")
        bad("reasoning_effort", "'reasoning_effort' must be one of low, medium, high");
      if (!r.template_kwargs.contains("reasoning_effort")) r.template_kwargs["reasoning_effort"] = e;
    }
    r.add_generation_prompt = field_bool(body, "add_generation_prompt", true);
  } else {
    parse_prompt(body, r, vocab_size);
    r.echo = field_bool(body, "echo", false);
    r.add_special_tokens = field_bool(body, "add_special_tokens", true);
    if (const J* v = field(body, "suffix"); v && !as_string(*v, "suffix").empty())
      bad("suffix", "'suffix' (fill-in-the-middle) is not supported");
    if (const J* v = field(body, "logprobs")) {
      r.completion_logprobs = static_cast<int32_t>(as_integer(*v, "logprobs", 0, kMaxTopLogprobs));
      r.params.logprobs = true;
      r.params.top_logprobs = r.completion_logprobs;
    }
    if (r.echo && r.params.logprobs) bad("echo", "'echo' together with 'logprobs' is not supported");
  }
  size_t sequences = r.num_prompts() * static_cast<size_t>(r.n);
  if (sequences > kMaxSequencesPerRequest)
    bad("n", "prompts x n = " + std::to_string(sequences) + " sequences; at most " +
                 std::to_string(kMaxSequencesPerRequest) + " per request");
  // The engine's own checks, so nothing reaches it that it would refuse.
  try {
    r.params.validate(vocab_size);
  } catch (const std::exception& e) {
    bad("", e.what());
  }
  return r;
}

}  // namespace spark
