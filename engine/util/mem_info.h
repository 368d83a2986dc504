// mem_info.h — host memory figures from /proc/meminfo.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace spark {

struct HostMemory {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable: what can be allocated without swapping
  std::string source;            // the file it came from, for messages
};

// Parses the text of /proc/meminfo ("Key:   123 kB" lines). Unknown lines, odd spacing
// and missing units are tolerated; values that overflow or are not numbers are skipped.
// Returns nullopt unless both MemTotal and MemAvailable were found.
std::optional<HostMemory> parse_meminfo(const std::string& text);

// Reads /proc/meminfo, or the file named by SPARKD_MEMINFO (lets tests and operators
// plan against a fixed figure). Throws RuntimeError when neither can be read or parsed.
HostMemory read_host_memory();

}  // namespace spark
