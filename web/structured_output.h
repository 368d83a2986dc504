// structured_output.h — the API's structured-output fields and constrained tool calls:
// OpenAI's response_format (json_object, json_schema), vLLM's structured_outputs and the
// older guided_json / guided_regex / guided_choice, and for tool_choice "required" or a
// named function the call's shape with the function's parameters schema. The result is
// compiled here, on the HTTP thread, so a slow schema never stalls the engine.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "web/app.h"
#include "web/openai_request.h"

namespace spark {

// At most one of the fields may be given (HttpError 400 naming the field otherwise);
// nullopt when none asks for a constraint (response_format "text" included).
// `param` is set to the field that asked.
std::optional<constrain::ConstraintSpec> parse_structured_output(const nlohmann::ordered_json& body, std::string& param);

// Sets request.params.constraint: the tool call's shape when tool_choice forces a call and
// the prompt already opens it (`prefill`, see chat_prompt.h), else the structured output
// the request asked for. Throws HttpError 400 naming the field when it cannot be compiled.
void attach_constraint(const App& app, ApiRequest& request, const std::string& prefill);

}  // namespace spark
