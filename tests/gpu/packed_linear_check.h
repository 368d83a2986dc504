// packed_linear_check.h — Gemm::linear on one packed matrix, for the per-format check
// programs (check_q8_0, check_fp8, check_nvfp4): at each row count, both paths (the packed
// GEMV up to kGemvMaxRows rows, the packed tensor-core tiles at every count) and both
// outputs, against the CPU backend's matmul on the same tensor and the same 16-bit
// activations; under the emulator, the bytes a decode step's linear layer reads.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/packed_gemm.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {

// The CPU backend's y = x · wᵀ ([rows, w.rows()]) from exactly the activations x.
inline std::vector<float> cpu_product(const std::vector<float>& x, int32_t rows, const Tensor& w) {
  std::vector<float> y(size_t(rows) * size_t(w.rows()));
  cpu::matmul_rows(x.data(), rows, w, 0, w.rows(), y.data(), w.rows());
  return y;
}

// The error a row may have by path and output (the formats differ in what the tiles' 16-bit
// copies of their weights round).
using LinearLimit = std::function<double(cuda::GemmPath, cuda::GemmOut)>;

// `w` is the device copy of `host` ([n, k]); one row per row count, path and output, named
// "NAME r=.. k=.. n=.. gemv|tiles T->f32|half".
template <typename T>
void check_packed_linear(const char* check, cuda::Gemm& gemm, const char* name, const cuda::DeviceMatrix& w,
                         const Tensor& host, const std::vector<int32_t>& row_counts, cudaStream_t stream,
                         uint64_t seed, const LinearLimit& limit) {
  const int32_t n = int32_t(host.rows()), k = int32_t(host.cols());
  for (int32_t rows : row_counts) {
    const std::vector<float> xf = round_half<T>(random_floats(size_t(rows) * k, seed * 131 + uint64_t(rows)));
    DeviceArray<T> x(to_half<T>(xf));
    const std::vector<float> ref = cpu_product(xf, rows, host);
    DeviceArray<float> y32(size_t(rows) * n);
    DeviceArray<T> y16(size_t(rows) * n);
    for (cuda::GemmPath path : {cuda::GemmPath::GEMV, cuda::GemmPath::CUBLASLT}) {
      if (path == cuda::GemmPath::GEMV && rows > cuda::kGemvMaxRows) continue;
      for (cuda::GemmOut out : {cuda::GemmOut::HALF, cuda::GemmOut::F32}) {
        y32.poison();
        y16.poison();
        void* y = out == cuda::GemmOut::F32 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
        gemm.linear(half_type_of<T>(), x.get(), rows, k, w, n, y, out, stream, path);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> got = out == cuda::GemmOut::F32 ? y32.download() : from_half(y16.download());
        error_row(check,
                  std::string(name) + " r=" + std::to_string(rows) + " k=" + std::to_string(k) + " n=" +
                      std::to_string(n) + (path == cuda::GemmPath::GEMV ? " gemv " : " tiles ") + half_name<T>() +
                      (out == cuda::GemmOut::F32 ? "->f32" : "->half"),
                  rel_error(ref, got), limit(path, out));
      }
    }
  }
}

// On a real device, a decode step's linear layer over a packed [n, k] matrix timed at
// 1..64 rows through AUTO (the GEMV up to kGemvMaxRows rows, one row tile past it): µs,
// and GB/s of its `packed` bytes beside the read and copy bandwidths. `make_copy` uploads one copy
// of the matrix; enough copies to pass 256 MB rotate, so L2 (50 MB on H100) holds none
// of them from one call to the next.
template <typename Copy>
void bench_packed_linear(const char* check, const std::string& name, int32_t k, int32_t n, double packed,
                         const std::function<std::unique_ptr<Copy>()>& make_copy, cudaStream_t stream) {
  constexpr int32_t kMaxRows = 64;
  std::vector<std::unique_ptr<Copy>> copies;
  while (copies.size() < 2 || double(copies.size() - 1) * packed < double(256 << 20)) copies.push_back(make_copy());
  DeviceArray<cuda::bf16> x(to_half<cuda::bf16>(random_floats(size_t(kMaxRows) * k, 5)));
  DeviceArray<cuda::bf16> y(size_t(kMaxRows) * n);
  cuda::Gemm gemm;
  const double copy_gbps = copy_bandwidth_gbs(), read_gbps = read_bandwidth_gbs();
  for (int32_t rows : {1, 8, 9, 16, 32, kMaxRows}) {
    constexpr int kCalls = 10;
    size_t next = 0;
    const double ms = time_ms(
        [&] {
          for (int i = 0; i < kCalls; ++i)
            gemm.linear(cuda::HalfType::BF16, x.get(), rows, k, copies[next++ % copies.size()]->matrix, n, y.get(),
                        cuda::GemmOut::HALF, stream);
        },
        stream, 21, 2);
    const double us = ms * 1e3 / kCalls, gbps = packed / (us * 1e-6) / 1e9;
    info(check,
         "bench " + name + " r=" + std::to_string(rows) + " k=" + std::to_string(k) + " n=" + std::to_string(n) +
             (rows > cuda::kGemvMaxRows ? " tiles" : " gemv"),
         fmt("%.1f us", us) + fmt(" %.0f GB/s", gbps),
         fmt("%.0f%% of read", 100.0 * gbps / read_gbps) + fmt(", %.0f%% of copy", 100.0 * gbps / copy_gbps));
  }
}

#if SPARK_CUDA_EMU
// The bytes one BF16 linear layer of a decode step, `rows` rows over `w` (the device copy
// of `host`), reads by the emulator's accounting, against what it must read; and its
// result against the CPU's. The GEMV (up to kGemvMaxRows rows): `packed` (the matrix's
// device bytes, scales included) plus the activations (limit 1.03). The tiles (9..64
// rows, one row tile): `packed` plus, when k is split, the partial sums (f32, written
// once and read once); their activations come by cp.async, which the accounting leaves
// out (limit 1.05).
inline void linear_byte_ratio(const char* check, const std::string& name, const cuda::DeviceMatrix& w,
                              const Tensor& host, double packed, int32_t rows, cudaStream_t stream, uint64_t seed) {
  const int32_t n = int32_t(host.rows()), k = int32_t(host.cols());
  const std::vector<float> xf = round_half<cuda::bf16>(random_floats(size_t(rows) * k, seed + 7));
  DeviceArray<cuda::bf16> x(to_half<cuda::bf16>(xf));
  DeviceArray<float> y(size_t(rows) * n);
  y.poison();
  cuda::Gemm gemm;
  ::emu::global_reads_begin();
  gemm.linear(cuda::HalfType::BF16, x.get(), rows, k, w, n, y.get(), cuda::GemmOut::F32, stream, cuda::GemmPath::AUTO);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const ::emu::GlobalReads reads = ::emu::global_reads_end();
  const bool tiles = rows > cuda::kGemvMaxRows;
  int splits = 1;
  if (tiles) {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    splits = cuda::packed_gemm_splits(rows, k, n, cuda::PackedScratch{y.get(), cuda::Gemm::kWorkspaceBytes, sms});
  }
  const double needed =
      packed + (tiles ? (splits > 1 ? double(splits) * rows * n * 4 : 0.0) : double(rows) * k * 2);
  const double ratio = double(reads.total()) / needed, limit = tiles ? 1.05 : 1.03;
  const std::string what = "bytes 8B " + name + " r=" + std::to_string(rows);
  row(check, what + " k=" + std::to_string(k) + " n=" + std::to_string(n) + (tiles ? " tiles" : " gemv"),
      fmt("%.4f", ratio) + fmt(" (%.1f MB read", double(reads.total()) / 1e6) +
          (tiles ? ", k split " + std::to_string(splits) + " ways)" : std::string(")")),
      fmt("<= %.2f", limit), ratio <= limit);
  // The tiles round each decoded weight to BF16 first (check_packed_linear's limits).
  error_row(check, what + " result", rel_error(cpu_product(xf, rows, host), y.download()), tiles ? 1e-2 : 1e-3);
}
#endif

}  // namespace spark::gpu_check
