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

}  // namespace spark
