// global_reads.cpp — the global-memory read accounting of emu/device.h (GlobalReads).
#include <unordered_set>

#include "emu/device.h"

namespace emu {

bool g_counting_reads = false;

namespace {
constexpr uintptr_t kSector = 32;
GlobalReads g_reads;
std::unordered_set<uintptr_t> g_sectors;  // cached sectors seen since global_reads_begin
}  // namespace

void count_global_read(const void* p, size_t bytes, bool streamed) {
  if (streamed) {
    g_reads.streamed_bytes += bytes;
    return;
  }
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / kSector;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) / kSector;
  for (uintptr_t s = first; s <= last; ++s)
    if (g_sectors.insert(s).second) g_reads.cached_bytes += kSector;
}

void global_reads_begin() {
  g_reads = GlobalReads{};
  g_sectors.clear();
  g_counting_reads = true;
}

GlobalReads global_reads_end() {
  g_counting_reads = false;
  g_sectors.clear();
  return g_reads;
}

}  // namespace emu
