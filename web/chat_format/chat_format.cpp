// chat_format.cpp — what every format shares: counting calls, choosing the parser.
#include "web/chat_format/chat_format.h"

#include "web/chat_format/think.h"

namespace spark {

std::vector<OutputEvent> OutputParser::counted(std::vector<OutputEvent> events) {
  for (const auto& e : events) num_calls_ += e.kind == OutputEvent::TOOL_CALL;
  return events;
}

std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options) {
  if (options.format) return options.format->make_parser(options);
  return think_then(options, content_only());
}

nlohmann::ordered_json function_parameters(const nlohmann::ordered_json& function) {
  return function.contains("parameters") && function["parameters"].is_object()
             ? function["parameters"]
             : nlohmann::ordered_json{{"type", "object"}};
}

}  // namespace spark
