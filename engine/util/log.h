// log.h — leveled log lines on stderr, as text or JSON; request lines carry the request id.
#pragma once
#include <sstream>
#include <string>
#include <string_view>

namespace spark {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

// Throws InputError for an unknown level or format name.
void log_configure(const std::string& level, const std::string& format);
bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view request_id, std::string_view message);

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream o;
  (o << ... << parts);
  return o.str();
}

template <typename... Parts>
void log_at(LogLevel level, const Parts&... parts) {
  if (log_enabled(level)) log_write(level, {}, str_cat(parts...));
}
template <typename... Parts> void log_debug(const Parts&... p) { log_at(LogLevel::DEBUG, p...); }
template <typename... Parts> void log_info(const Parts&... p) { log_at(LogLevel::INFO, p...); }
template <typename... Parts> void log_warn(const Parts&... p) { log_at(LogLevel::WARN, p...); }
template <typename... Parts> void log_error(const Parts&... p) { log_at(LogLevel::ERROR, p...); }

// A line about one request: the id is a field of its own in both formats.
template <typename... Parts>
void log_request(LogLevel level, std::string_view request_id, const Parts&... parts) {
  if (log_enabled(level)) log_write(level, request_id, str_cat(parts...));
}

}  // namespace spark
