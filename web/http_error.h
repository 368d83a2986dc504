// http_error.h — an error that becomes an OpenAI-shaped JSON response with its status.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace spark {

struct HttpError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the offending request field, or ""
  std::string code;   // machine-readable code, or ""
  HttpError(int status_, std::string message, std::string type_ = "", std::string param_ = "", std::string code_ = "")
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
};

// {"error": {"message", "type", "param", "code"}} as OpenAI sends it; null for empty fields.
nlohmann::json error_body(int status, const std::string& message, const std::string& type = "",
                          const std::string& param = "", const std::string& code = "");
// {"type": "error", "error": {"type", "message"}} as Anthropic's Messages API sends it;
// the type follows the status (invalid_request_error, not_found_error, overloaded_error...).
nlohmann::json anthropic_error_body(int status, const std::string& message);
// The OpenAI error type for a status when none is given.
std::string default_error_type(int status);

}  // namespace spark
