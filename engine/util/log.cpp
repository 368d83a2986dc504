// log.cpp — formatting and writing of log lines; one write per line so threads never interleave.
#include "engine/util/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "engine/util/check.h"

namespace spark {
namespace {

std::atomic<int> g_min_level{int(LogLevel::INFO)};
std::atomic<bool> g_json{false};

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::DEBUG: return "debug";
    case LogLevel::INFO: return "info";
    case LogLevel::WARN: return "warn";
    case LogLevel::ERROR: return "error";
  }
  return "?";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
  return buf;
}

}  // namespace

void log_configure(const std::string& level, const std::string& format) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  int found = -1;
  for (int i = 0; i < 4; ++i)
    if (level == names[i]) found = i;
  if (found < 0) throw InputError("unknown log level '" + level + "'; accepted: debug, info, warn, error");
  if (format != "text" && format != "json") throw InputError("unknown log format '" + format + "'; accepted: text, json");
  g_min_level = found;
  g_json = format == "json";
}

bool log_enabled(LogLevel level) { return int(level) >= g_min_level.load(std::memory_order_relaxed); }

void log_write(LogLevel level, std::string_view request_id, std::string_view message) {
  std::string line;
  if (g_json) {
    nlohmann::json j = {{"ts", timestamp()}, {"level", level_name(level)}};
    if (!request_id.empty()) j["request_id"] = request_id;
    j["msg"] = message;
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = timestamp() + " " + level_name(level);
    if (!request_id.empty()) line += " [" + std::string(request_id) + "]";
    line += " ";
    line += message;
  }
  line += '\n';
  // A single write(2) keeps concurrent lines whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace spark
