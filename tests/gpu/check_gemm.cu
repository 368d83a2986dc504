// check_gemm.cu — the linear layers (gemm.h, gemv.h): correctness of both paths, both
// compute types (bf16, f16) and both outputs against a double-precision CPU reference,
// capture in a CUDA graph, and the benchmarks (bf16) the decode and prefill acceptance
// compare with (copy bandwidth, weight-streaming rate at 1..8 rows, cuBLASLt TFLOP/s at
// 2048 rows and for an 8192^3 GEMM).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/util/splitmix.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
using cuda::Gemm;
using cuda::GemmOut;
using cuda::GemmPath;
using cuda::HalfType;

const char* kCheck = "gemm";

std::string shape_name(const char* name, int32_t rows, int32_t k, int32_t n) {
  return std::string(name) + " r=" + std::to_string(rows) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
}
const char* path_name(GemmPath p) {
  return p == GemmPath::GEMV ? "gemv" : p == GemmPath::CUBLASLT ? "cublaslt" : "auto";
}
// "bf16->f32", "f16->f16", ...: the input type and what y holds.
template <typename T>
std::string types_name(GemmOut o) {
  return std::string(half_name<T>()) + "->" + (o == GemmOut::F32 ? "f32" : half_name<T>());
}

// Random values in [-1, 1) rounded to T (bf16 or f16), built a slice at a time, so an
// n·k weight matrix never exists on the host as floats too.
template <typename T>
std::vector<T> random_half(size_t count, uint64_t seed) {
  std::vector<T> out(count);
  const size_t slice = size_t(1) << 22;
  for (size_t off = 0; off < count; off += slice) {
    const size_t len = std::min(slice, count - off);
    const std::vector<float> f = random_floats(len, splitmix64(seed) + off / slice);
    for (size_t i = 0; i < len; ++i) out[off + i] = cuda::from_f32<T>(f[i]);
  }
  return out;
}

// A 64-bit mixer for the device (splitmix.h is host-only): any well-spread hash will do
// for benchmark data.
__device__ __forceinline__ uint64_t device_mix(uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  v ^= v >> 33;
  v *= 0xc4ceb9fe1a85ec53ull;
  return v ^ (v >> 33);
}

// Benchmark weights are generated on the device: uploading gigabytes would dominate the run.
__global__ void fill_random_bf16(bf16* p, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = device_mix(seed * 0x9E3779B97F4A7C15ull + i);
    p[i] = __float2bfloat16(float(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

void fill_device(bf16* p, size_t count, uint64_t seed, cudaStream_t stream) {
  fill_random_bf16<<<1024, 256, 0, stream>>>(p, count, seed);
  CUDA_CHECK_LAUNCH();
}

// ---- correctness ------------------------------------------------------------------

struct Shape {
  const char* name;
  int32_t k, n;
  std::vector<int32_t> rows;
};

// y from the device as floats, whichever dtype it was written in.
template <typename T>
std::vector<float> download_out(const DeviceArray<float>& y32, const DeviceArray<T>& y16, GemmOut out) {
  return out == GemmOut::F32 ? y32.download() : from_half(y16.download());
}

// max rel error of y[rows, n] over the sampled columns, or +inf when any output at all
// (sampled or not) is non-finite: the poison left in an unwritten element.
double sampled_error(const std::vector<float>& y, int32_t rows, int32_t n, const std::vector<int32_t>& cols,
                     const std::vector<double>& ref) {
  for (float v : y)
    if (!std::isfinite(v)) return INFINITY;
  std::vector<float> got, want;
  got.reserve(ref.size());
  want.reserve(ref.size());
  for (int32_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols.size(); ++c) {
      got.push_back(y[size_t(r) * n + size_t(cols[c])]);
      want.push_back(float(ref[size_t(r) * cols.size() + c]));
    }
  return rel_error(want, got);
}

// T: the compute type (bf16 or f16) of x, w and a HALF y.
template <typename T>
void check_shape(Gemm& gemm, const Shape& s, cudaStream_t stream, uint64_t seed) {
  const std::vector<T> w_host = random_half<T>(size_t(s.n) * s.k, seed);
  DeviceArray<T> w(w_host);
  for (int32_t rows : s.rows) {
    const std::vector<T> x_host = random_half<T>(size_t(rows) * s.k, seed * 31 + uint64_t(rows));
    DeviceArray<T> x(x_host);

    // Columns to check: all when the reference is cheap, else enough random ones (plus
    // the first and last, where tile edges are) to keep it to ~2^28 multiply-adds.
    std::vector<int32_t> cols;
    const double macs_per_col = double(rows) * s.k;
    const int64_t budget_cols = std::max<int64_t>(16, int64_t((1 << 28) / macs_per_col));
    if (budget_cols >= s.n) {
      for (int32_t c = 0; c < s.n; ++c) cols.push_back(c);
    } else {
      cols.push_back(0);
      cols.push_back(s.n - 1);
      for (int64_t i = 0; int64_t(cols.size()) < budget_cols; ++i)
        cols.push_back(int32_t(splitmix64(seed ^ (uint64_t(rows) << 32) ^ uint64_t(i)) % uint64_t(s.n)));
    }

    // Reference in double from exactly the 16-bit values the GPU reads.
    const std::vector<float> xf = from_half(x_host);
    std::vector<float> wc(size_t(s.k));
    std::vector<double> ref(size_t(rows) * cols.size());
    for (size_t c = 0; c < cols.size(); ++c) {
      const T* wr = w_host.data() + size_t(cols[c]) * s.k;
      for (int32_t i = 0; i < s.k; ++i) wc[size_t(i)] = cuda::to_f32<T>(wr[i]);
      for (int32_t r = 0; r < rows; ++r) {
        const float* xr = xf.data() + size_t(r) * s.k;
        double acc = 0;
        for (int32_t i = 0; i < s.k; ++i) acc += double(xr[i]) * double(wc[size_t(i)]);
        ref[size_t(r) * cols.size() + c] = acc;
      }
    }

    DeviceArray<float> y32(size_t(rows) * s.n);
    DeviceArray<T> y16(size_t(rows) * s.n);
    for (GemmPath path : {GemmPath::GEMV, GemmPath::CUBLASLT}) {
      if (path == GemmPath::GEMV && rows > cuda::kGemvMaxRows) continue;
      for (GemmOut out : {GemmOut::HALF, GemmOut::F32}) {
        y32.poison();
        y16.poison();
        void* y = out == GemmOut::F32 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
        gemm.linear(half_type_of<T>(), x.get(), rows, s.k, w.get(), s.n, y, out, stream, path);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const double err = sampled_error(download_out(y32, y16, out), rows, s.n, cols, ref);
        error_row(kCheck, shape_name(s.name, rows, s.k, s.n) + " " + path_name(path) + " " + types_name<T>(out), err,
                  out == GemmOut::F32 ? 1e-3 : half_limit<T>());
      }
    }
  }
}

// A shape that ran once eagerly must replay from a CUDA graph with the same result.
template <typename T>
void check_capture(Gemm& gemm, cudaStream_t stream) {
  const int32_t k = 4096, n = 6144;
  const HalfType type = half_type_of<T>();
  DeviceArray<T> w(random_half<T>(size_t(n) * k, 77));
  for (auto [rows, path] : {std::pair{8, GemmPath::GEMV}, std::pair{64, GemmPath::CUBLASLT}}) {
    DeviceArray<T> x(random_half<T>(size_t(rows) * k, 78 + uint64_t(rows)));
    DeviceArray<float> eager(size_t(rows) * n), graphed(size_t(rows) * n);
    eager.poison();
    graphed.poison();
    gemm.linear(type, x.get(), rows, k, w.get(), n, eager.get(), GemmOut::F32, stream, path);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    gemm.linear(type, x.get(), rows, k, w.get(), n, graphed.get(), GemmOut::F32, stream, path);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    const double err = rel_error(eager.download(), graphed.download());
    error_row(kCheck, shape_name("graph replay", rows, k, n) + " " + path_name(path) + " " + half_name<T>(), err, 1e-5);
  }
}

// ---- benchmarks -------------------------------------------------------------------

struct Bandwidth {
  double copy_gbps = 0, read_gbps = 0;
};

Bandwidth measure_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceArray<uint8_t> a(bytes), b(bytes);
  CUDA_CHECK(cudaMemsetAsync(a.get(), 0x5A, bytes, stream));
  Bandwidth bw;
  const double copy_ms = time_ms(
      [&] { CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream)); }, stream, 20, 3);
  bw.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  bw.read_gbps = read_bandwidth_gbs();
  info(kCheck, "bench copy bandwidth (1 GiB d2d, read+write)", fmt("%.0f GB/s", bw.copy_gbps), "reference");
  info(kCheck, "bench read bandwidth (1 GiB streaming sum)", fmt("%.0f GB/s", bw.read_gbps),
       fmt("%.2fx copy", bw.read_gbps / bw.copy_gbps));
  return bw;
}

// Copies of one weight matrix, enough that rotating through them defeats the 50 MB L2.
struct RotatingWeights {
  std::vector<DeviceArray<bf16>> copies;
  size_t next = 0;
  RotatingWeights(int32_t k, int32_t n, cudaStream_t stream) {
    const size_t bytes = size_t(k) * n * sizeof(bf16);
    const size_t count = std::max<size_t>(2, (size_t(256) << 20) / bytes + 1);
    for (size_t i = 0; i < count; ++i) {
      copies.emplace_back(size_t(k) * n);
      fill_device(copies.back().get(), size_t(k) * n, 1000 + i, stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const bf16* take() {
    const bf16* p = copies[next].get();
    next = (next + 1) % copies.size();
    return p;
  }
};

// Median µs of one call, timed over batches of calls so that the event resolution and
// launch gaps stay small beside the kernels.
double time_linear_us(Gemm& gemm, RotatingWeights& weights, const bf16* x, int32_t rows, int32_t k, int32_t n, void* y,
                      GemmOut out, GemmPath path, cudaStream_t stream, int batch = 10, int runs = 21) {
  const double ms = time_ms(
      [&] {
        for (int i = 0; i < batch; ++i)
          gemm.linear(HalfType::BF16, x, rows, k, weights.take(), n, y, out, stream, path);
      },
      stream, runs, 2);
  return ms * 1e3 / batch;
}

struct BenchShape {
  const char* name;
  int32_t k, n;
  GemmOut out;
};

// Llama-3.1-8B's linear layers (q/k/v and gate/up fused as the engine runs them), in BF16
// as its checkpoint: FP16 runs the same kernels with another mma type.
const std::vector<BenchShape>& llama8b_shapes() {
  static const std::vector<BenchShape> shapes = {
      {"qkv", 4096, 6144, GemmOut::HALF},      {"o", 4096, 4096, GemmOut::HALF},
      {"gate_up", 4096, 28672, GemmOut::HALF}, {"down", 14336, 4096, GemmOut::HALF},
      {"lm_head", 4096, 128256, GemmOut::F32},
  };
  return shapes;
}

// Up to 8 rows both paths; 16 to 64 rows (a large decode batch) cuBLASLt only, whose
// bandwidth there decides how much a batch-64 step costs beside a batch-1 step.
void bench_decode(Gemm& gemm, const Bandwidth& bw, cudaStream_t stream) {
  constexpr int32_t kMaxRows = 64;
  DeviceArray<bf16> x(random_half<bf16>(size_t(kMaxRows) * 14336, 5));
  for (const BenchShape& s : llama8b_shapes()) {
    RotatingWeights weights(s.k, s.n, stream);
    DeviceArray<float> y(size_t(kMaxRows) * s.n);  // large enough for either dtype
    const double weight_bytes = double(s.k) * s.n * sizeof(bf16);
    for (int32_t rows : {1, 2, 4, 8, 16, 32, kMaxRows}) {
      for (GemmPath path : {GemmPath::GEMV, GemmPath::CUBLASLT}) {
        if (path == GemmPath::GEMV && rows > cuda::kGemvMaxRows) continue;
        const double us = time_linear_us(gemm, weights, x.get(), rows, s.k, s.n, y.get(), s.out, path, stream);
        const double gbps = weight_bytes / (us * 1e-6) / 1e9;
        char m[64], r[64];
        std::snprintf(m, sizeof m, "%.1f us %.0f GB/s", us, gbps);
        std::snprintf(r, sizeof r, "%.0f%% of copy%s", 100.0 * gbps / bw.copy_gbps,
                      gemm.choose(rows, s.k, s.n) == path ? " (auto)" : "");
        info(kCheck, std::string("bench ") + path_name(path) + " " + shape_name(s.name, rows, s.k, s.n), m, r);
      }
    }
  }
}

void bench_prefill(Gemm& gemm, cudaStream_t stream) {
  const int32_t rows = 2048;
  DeviceArray<bf16> x(size_t(rows) * 14336);
  fill_device(x.get(), x.size(), 6, stream);
  for (const BenchShape& s : llama8b_shapes()) {
    RotatingWeights weights(s.k, s.n, stream);
    DeviceArray<float> y(size_t(rows) * s.n);
    const double us =
        time_linear_us(gemm, weights, x.get(), rows, s.k, s.n, y.get(), s.out, GemmPath::CUBLASLT, stream, 2, 11);
    const double tflops = 2.0 * rows * double(s.k) * s.n / (us * 1e-6) / 1e12;
    info(kCheck, std::string("bench cublaslt ") + shape_name(s.name, rows, s.k, s.n), fmt("%.0f TFLOP/s", tflops),
         fmt("%.1f us", us));
  }
  const int32_t m = 8192;
  DeviceArray<bf16> a(size_t(m) * m);
  DeviceArray<bf16> c(size_t(m) * m);
  fill_device(a.get(), a.size(), 7, stream);
  RotatingWeights weights(m, m, stream);
  const double us =
      time_linear_us(gemm, weights, a.get(), m, m, m, c.get(), GemmOut::HALF, GemmPath::CUBLASLT, stream, 1, 11);
  const double tflops = 2.0 * double(m) * m * m / (us * 1e-6) / 1e12;
  info(kCheck, "bench cublaslt reference 8192x8192x8192 bf16", fmt("%.0f TFLOP/s", tflops), "prefill reference");
}

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Gemm gemm;
    const std::vector<int32_t> all_rows = {1, 2, 3, 5, 8, 16, 64, 2048};
    const std::vector<int32_t> no_2048 = {1, 2, 3, 5, 8, 16, 64};
    // Emulated, a GEMV launch costs by n·k whatever its rows, and the emulated cuBLASLt by
    // rows·n·k: the three large shapes took ~85% of the run. There they keep 1 row, an odd
    // partial count (3: a lane pair with one row stored), all 8, and 16 (cuBLASLt only);
    // rows 2, 5 and 64 take the same paths, and the small shapes still run every count.
    // down keeps 3 and 16: what it adds over qkv (same k split of 8, k % 128 = 0) is the
    // long k (14 chunks a warp), which one count shows. wide-odd keeps no k split (its
    // 3073 tiles fill the SMs whatever k is) and its 1-row last tile at k = 1024.
    const bool emu = emulated();
    const std::vector<int32_t> large_rows = emu ? std::vector<int32_t>{1, 3, 8, 16} : all_rows;
    // Odd shapes first: tile edges (n % 16 != 0), k tails (k % 128 != 0) and every k split.
    std::vector<Shape> shapes = {
        {"odd", 1000, 4097, all_rows},    // k % 128 = 104, a 1-row last tile
        {"k-tail", 2056, 1000, no_2048},  // k % 128 = 8: one lane of four in the tail
        {"split", 1032, 12000, no_2048},  // a middling k split, k % 128 = 8
        {"qkv", 4096, 6144, large_rows},  // Llama-3.1-8B
        {"down", 14336, 4096, emu ? std::vector<int32_t>{3, 16} : all_rows},  // Llama-3.1-8B
        {"wide-odd", emu ? 1024 : 4096, 49153, emu ? large_rows : no_2048},   // no k split, n = 3072 * 16 + 1
    };
    if (emulated())  // the emulated cuBLASLt is a plain CPU loop: 2048 rows would take minutes
      for (Shape& s : shapes) std::erase(s.rows, 2048);
    uint64_t seed = 1;
    for (const Shape& s : shapes) {
      check_shape<bf16>(gemm, s, stream, seed);
      check_shape<f16>(gemm, s, stream, seed);
      ++seed;
    }
    check_capture<bf16>(gemm, stream);
    check_capture<f16>(gemm, stream);

    if (!emulated()) {  // benchmarks mean nothing on the CPU emulator
      const Bandwidth bw = measure_bandwidth(stream);
      bench_decode(gemm, bw, stream);
      bench_prefill(gemm, stream);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("gemm", [] { spark::gpu_check::run(); });
}
