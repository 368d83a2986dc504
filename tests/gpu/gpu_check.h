// gpu_check.h — what every GPU check program shares: random inputs (never zeros),
// device buffers poisoned before each run, a normwise relative error, CUDA-event timing
// (median of many runs after warm-up), and the one-line result rows that run_checks.sh
// gathers into the table `make gpu-check` prints.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/util/splitmix.h"

namespace spark::gpu_check {

// True when built for the CPU emulator (tests/gpu/emu): checks then skip their benchmarks
// and shrink their largest cases, since every CUDA thread runs as a CPU fiber.
constexpr bool emulated() {
#if SPARK_CUDA_EMU
  return true;
#else
  return false;
#endif
}

// Uniform in [lo, hi), nudged off zero: a zero input hides an output never written.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float u = float(splitmix64(seed * 0x9E3779B97F4A7C15ull + i) >> 40) * (1.0f / 16777216.0f);
    float x = lo + (hi - lo) * u;
    v[i] = x == 0.0f ? 1e-3f : x;
  }
  return v;
}

// Host conversions for a 16-bit compute type T (bf16 or f16): values rounded as the GPU
// will see them (so the CPU reference gets the same inputs), and the vectors that go up
// and come down.
template <typename T>
std::vector<float> round_half(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = cuda::to_f32<T>(cuda::from_f32<T>(v[i]));
  return r;
}

template <typename T>
std::vector<T> to_half(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = cuda::from_f32<T>(v[i]);
  return r;
}

// The HalfType and the name of a compute type T (bf16 or f16).
template <typename T>
constexpr cuda::HalfType half_type_of() {
  return std::is_same_v<T, cuda::f16> ? cuda::HalfType::F16 : cuda::HalfType::BF16;
}
template <typename T>
const char* half_name() {
  return std::is_same_v<T, cuda::f16> ? "f16" : "bf16";
}

template <typename T>
std::vector<float> from_half(const std::vector<T>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = cuda::to_f32<T>(v[i]);
  return r;
}

// A device array that owns its memory. fill(0xFF) poisons: all-ones bytes are NaN in f32, bf16 and f16.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (p_) cudaFree(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  void upload(const std::vector<T>& host) {
    SPARK_CHECK(host.size() <= n_, "upload larger than the array");
    CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void poison() { CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// max |got - ref| / max |ref|; NaN or Inf anywhere in got gives +inf.
inline double rel_error(const std::vector<float>& ref, const std::vector<float>& got) {
  SPARK_CHECK(ref.size() == got.size(), "rel_error: sizes differ");
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(got[i]) - double(ref[i])));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Median milliseconds of `fn` (which queues work on `stream`) over `runs` runs after `warmup`.
inline double time_ms(const std::function<void()>& fn, cudaStream_t stream = nullptr, int runs = 50, int warmup = 5) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms(static_cast<size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(i)], a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The device's copy bandwidth (bytes read + written per second, GB/s): 2 GiB D2D copies,
// the reference beside which bandwidth-bound benchmarks print their rates.
inline double copy_bandwidth_gbs() {
  const size_t bytes = size_t(2) << 30;
  DeviceArray<char> a(bytes), b(bytes);
  CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const double ms = time_ms(
      [&] { CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, nullptr)); }, nullptr, 20, 3);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// Reads `n16` 16-byte words once, four loads in flight a thread; the xor keeps every load
// live and the store that never happens keeps the xor.
template <int = 0>
__global__ void read_stream_kernel(const uint4* __restrict__ p, size_t n16, unsigned* out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = cuda::ld_global_nc_na_v4(p + i), b = cuda::ld_global_nc_na_v4(p + i + stride),
                c = cuda::ld_global_nc_na_v4(p + i + 2 * stride), d = cuda::ld_global_nc_na_v4(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = cuda::ld_global_nc_na_v4(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *out = acc;
}

// The device's read bandwidth (GB/s): a streaming sum over 1 GiB, 8 blocks of 256 threads
// an SM. A decode step reads its weights and writes little, so this is its roof, and the
// decode rows print it beside the copy bandwidth. Measured once a process.
inline double read_bandwidth_gbs() {
  static const double gbs = [] {
    const size_t bytes = size_t(1) << 30;
    DeviceArray<uint8_t> a(bytes);
    DeviceArray<unsigned> sink(1);
    CUDA_CHECK(cudaMemset(a.get(), 0x5A, bytes));
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const double ms = time_ms(
        [&] {
          cuda::launch_kernel("read_stream_kernel", false, read_stream_kernel<>, dim3(unsigned(sms * 8)), dim3(256), 0,
                              nullptr, reinterpret_cast<const uint4*>(a.get()), bytes / 16, sink.get());
        },
        nullptr, 20, 3);
    return double(bytes) / (ms * 1e-3) / 1e9;
  }();
  return gbs;
}

// The reference column of a decode benchmark's row: both bandwidths and the batch-1 bound
// that reading `bytes_per_token` at the read bandwidth gives.
inline std::string decode_roof(double copy_gbs, double bytes_per_token) {
  const double read_gbs = read_bandwidth_gbs();
  char s[160];
  std::snprintf(s, sizeof s, "copy %.0f, read %.0f GB/s; b=1 bound %.0f tok/s", copy_gbs, read_gbs,
                read_gbs * 1e9 / bytes_per_token);
  return s;
}

// One row of the final table: "ROW|<check>|<case>|<measured>|<limit or reference>|PASS/FAIL/INFO/SKIP".
// Checks with a limit pass or fail; benchmarks print INFO rows; a check not run here prints
// a SKIP row with the reason, so no row vanishes unseen. Returns `pass`.
// A '|' inside a field would shift the table's columns: it is printed as '/'.
inline std::string field(std::string s) {
  std::replace(s.begin(), s.end(), '|', '/');
  return s;
}
inline int g_failures = 0;
inline bool row(const std::string& check, const std::string& what, const std::string& measured,
                const std::string& limit, bool pass) {
  std::printf("ROW|%s|%s|%s|%s|%s\n", field(check).c_str(), field(what).c_str(), field(measured).c_str(),
              field(limit).c_str(), pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  if (!pass) ++g_failures;
  return pass;
}
inline void info(const std::string& check, const std::string& what, const std::string& measured,
                 const std::string& reference) {
  std::printf("ROW|%s|%s|%s|%s|INFO\n", field(check).c_str(), field(what).c_str(), field(measured).c_str(),
              field(reference).c_str());
  std::fflush(stdout);
}
inline void skip_row(const std::string& check, const std::string& what, const std::string& reason) {
  std::printf("ROW|%s|%s|-|%s|SKIP\n", field(check).c_str(), field(what).c_str(), field(reason).c_str());
  std::fflush(stdout);
}
// A model file the checks read from models/ (`make model` fetches it). When it is missing
// its rows fail, unless GPU_CHECK_MODELS=optional: then they are skipped with the reason
// (a GPU machine the file did not travel to; tests/gpu/device_run.py sets it).
inline bool model_file_present(const std::string& check, const std::string& what, const char* path) {
  if (std::filesystem::exists(path)) return true;
  const char* models = std::getenv("GPU_CHECK_MODELS");
  if (models && std::string(models) == "optional")
    skip_row(check, what, std::string(path) + " is not here (GPU_CHECK_MODELS=optional)");
  else
    row(check, what, std::string(path) + " missing", "run make model", false);
  return false;
}

// The limit for a 16-bit result against an f32 reference. BF16 keeps 8 significant bits
// (rounding 2^-9 ≈ 2e-3 a value), FP16 keeps 11 (2^-12 ≈ 2.4e-4); with headroom for the
// summation order the kernels measure up to ~3e-3 and ~4e-4. One limit for both would let
// an FP16 kernel 25x worse than its rounding pass.
inline constexpr double kBf16Limit = 1e-2;
inline constexpr double kF16Limit = 2e-3;
inline double half_limit(cuda::HalfType t) { return t == cuda::HalfType::BF16 ? kBf16Limit : kF16Limit; }
template <typename T>
constexpr double half_limit() {
  return std::is_same_v<T, cuda::bf16> ? kBf16Limit : kF16Limit;
}

// Relative-error row: pass when err <= limit.
inline bool error_row(const std::string& check, const std::string& what, double err, double limit) {
  char m[32], l[32];
  std::snprintf(m, sizeof m, "rel err %.2e", err);
  std::snprintf(l, sizeof l, "<= %.0e", limit);
  return row(check, what, m, l, err <= limit);
}

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// main() of a check program: runs body, turns exceptions into a failed row, and exits 1 on any failure.
inline int run_main(const char* check, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    row(check, "exception", e.what(), "-", false);
  }
  return g_failures ? 1 : 0;
}

// One part of a check program: its exception is its failed row, and the other parts still
// run. CHECK_PART=TEXT runs only the parts whose name contains TEXT (to rerun one while
// working on it).
inline void run_part(const char* check, const std::string& what, const std::function<void()>& fn) {
  const char* only = std::getenv("CHECK_PART");
  if (only && what.find(only) == std::string::npos) return;
  try {
    fn();
  } catch (const std::exception& e) {
    row(check, what, e.what(), "-", false);
  }
}

}  // namespace spark::gpu_check
