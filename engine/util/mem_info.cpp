// mem_info.cpp — MemTotal / MemAvailable from /proc/meminfo.
#include "engine/util/mem_info.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/util/check.h"

namespace spark {
namespace {

// "  24085548 kB" -> bytes; nullopt for anything that is not a clean number.
std::optional<uint64_t> parse_value(const std::string& rest) {
  size_t i = 0;
  while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
  if (i == rest.size() || rest[i] < '0' || rest[i] > '9') return std::nullopt;
  uint64_t v = 0;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
    uint64_t d = static_cast<uint64_t>(rest[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
  std::string unit = rest.substr(i);
  while (!unit.empty() && (unit.back() == '\r' || unit.back() == ' ')) unit.pop_back();
  uint64_t mult = 1;
  if (unit == "kB" || unit == "KB" || unit == "kiB" || unit == "KiB") mult = 1024;
  else if (unit == "mB" || unit == "MB" || unit == "MiB") mult = 1024ull * 1024;
  else if (unit == "gB" || unit == "GB" || unit == "GiB") mult = 1024ull * 1024 * 1024;
  else if (!unit.empty()) return std::nullopt;
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

}  // namespace

std::optional<HostMemory> parse_meminfo(const std::string& text) {
  std::optional<uint64_t> total, avail;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    if (key == "MemTotal") total = parse_value(line.substr(colon + 1));
    else if (key == "MemAvailable") avail = parse_value(line.substr(colon + 1));
  }
  if (!total || !avail) return std::nullopt;
  HostMemory m;
  m.total_bytes = *total;
  m.available_bytes = *avail;
  return m;
}

HostMemory read_host_memory() {
  const char* override_path = std::getenv("SPARKD_MEMINFO");
  std::string path = override_path && *override_path ? override_path : "/proc/meminfo";
  std::ifstream f(path);
  if (!f) throw RuntimeError("cannot read " + path + " to size the memory budget");
  std::ostringstream ss;
  ss << f.rdbuf();
  auto m = parse_meminfo(ss.str());
  if (!m) throw RuntimeError(path + " has no MemTotal / MemAvailable lines");
  m->source = path;
  return *m;
}

}  // namespace spark
