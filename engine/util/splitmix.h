// splitmix.h — splitmix64, the small mixing function behind sparkd's seeded random streams.
#pragma once
#include <cstdint>

namespace spark {

// One splitmix64 step: every input bit moves every output bit, so counters and seeds
// mixed through it give independent-looking streams.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace spark
