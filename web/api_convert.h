// api_convert.h — what the Responses and Messages APIs share when their bodies become a
// chat completions body: flat function tools, and the sampling fields sparkd accepts beyond
// an API's own.
#pragma once
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace spark {

// Tools given flat ({"type", "name", "description", <schema_key>}) in the chat shape
// ({"type": "function", "function": {...}}). A tool whose "type" is not among
// `function_types` ("" = no type given) is refused with 400 naming `tools`, saying
// `what_is_served`; the schema must be an object, and present when `schema_required`.
nlohmann::ordered_json flat_tools_as_chat(const nlohmann::ordered_json& tools, const char* schema_key,
                                          bool schema_required, std::initializer_list<const char*> function_types,
                                          const std::string& what_is_served);

// Copies seed, top_k, min_p, the penalties, logit_bias and ignore_eos from an API's body
// into the chat body it becomes (the SDKs send them with extra_body, as vLLM accepts them).
void copy_sampling_extensions(const nlohmann::ordered_json& from, nlohmann::ordered_json& to);

}  // namespace spark
