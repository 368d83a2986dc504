// http_error.cpp — OpenAI error bodies.
#include "web/http_error.h"

namespace spark {

std::string default_error_type(int status) {
  switch (status) {
    case 400: case 404: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 408: return "timeout_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json error_body(int status, const std::string& message, const std::string& type,
                          const std::string& param, const std::string& code) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error",
           {{"message", message},
            {"type", type.empty() ? default_error_type(status) : type},
            {"param", or_null(param)},
            {"code", code.empty() ? nlohmann::json(status) : nlohmann::json(code)}}}};
}

nlohmann::json anthropic_error_body(int status, const std::string& message) {
  const char* type = "api_error";
  switch (status) {
    case 400: case 405: case 499: type = "invalid_request_error"; break;
    case 408: type = "timeout_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: case 529: type = "overloaded_error"; break;
    default: type = status < 500 ? "invalid_request_error" : "api_error";
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace spark
