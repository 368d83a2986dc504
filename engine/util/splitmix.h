// splitmix.h — splitmix64, the small mixing function behind sparkd's seeded random streams.
#pragma once
#include <cstdint>

// Host and device: the CUDA sampler draws the same (seed, counter) streams as the CPU one.
#ifdef __CUDACC__
#define SPARK_HOST_DEVICE __host__ __device__
#else
#define SPARK_HOST_DEVICE
#endif

namespace spark {

// One splitmix64 step: every input bit moves every output bit, so counters and seeds
// mixed through it give independent-looking streams.
SPARK_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The body of uniform01 (engine/core/sampler.h), usable on the device: integer mixing,
// then an exact conversion of 53 bits, so host and device give the same double bit for bit.
// Two rounds keep nearby (seed, counter) pairs from giving correlated streams.
SPARK_HOST_DEVICE inline double splitmix_uniform01(uint64_t seed, uint64_t counter) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace spark
