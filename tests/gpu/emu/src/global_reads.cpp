// global_reads.cpp — the global-memory read accounting of emu/device.h (GlobalReads).
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "emu/device.h"

namespace emu {

bool g_counting_reads = false;
uint64_t g_launch_serial = 0;

namespace {
constexpr uintptr_t kSector = 32;
GlobalReads g_reads;
std::unordered_set<uintptr_t> g_sectors;  // cached sectors seen since global_reads_begin
uint32_t g_resident_blocks = 0;
std::vector<std::pair<uintptr_t, uintptr_t>> g_watched;  // [first, end) byte ranges
struct LastRead {
  uint64_t launch, block;
};
std::unordered_map<uintptr_t, LastRead> g_last_read;  // watched sector -> its last reader

uint64_t block_linear() {
  return g_block_idx.x + uint64_t(g_grid_dim.x) * (g_block_idx.y + uint64_t(g_grid_dim.y) * g_block_idx.z);
}

bool watched(uintptr_t sector) {
  const uintptr_t at = sector * kSector;
  for (const auto& [first, end] : g_watched)
    if (at + kSector > first && at < end) return true;
  return false;
}

void count_dram(uintptr_t sector) {
  if (g_watched.empty() || !watched(sector)) return;
  const LastRead now{g_launch_serial, block_linear()};
  auto [it, fresh] = g_last_read.try_emplace(sector, now);
  if (fresh || it->second.launch != now.launch || now.block - it->second.block > g_resident_blocks)
    g_reads.dram_bytes += kSector;
  it->second = now;
}
}  // namespace

void count_global_read(const void* p, size_t bytes, bool streamed) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / kSector;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) / kSector;
  for (uintptr_t s = first; s <= last; ++s) count_dram(s);
  if (streamed) {
    g_reads.streamed_bytes += bytes;
    return;
  }
  for (uintptr_t s = first; s <= last; ++s)
    if (g_sectors.insert(s).second) g_reads.cached_bytes += kSector;
}

void global_reads_begin(uint32_t resident_blocks) {
  g_reads = GlobalReads{};
  g_sectors.clear();
  g_last_read.clear();
  g_watched.clear();
  g_resident_blocks = resident_blocks;
  g_counting_reads = true;
}

void global_reads_watch(const void* p, size_t bytes) {
  g_watched.emplace_back(reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes);
}

GlobalReads global_reads_end() {
  g_counting_reads = false;
  g_sectors.clear();
  g_last_read.clear();
  g_watched.clear();
  return g_reads;
}

}  // namespace emu
