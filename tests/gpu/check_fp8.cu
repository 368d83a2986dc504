// check_fp8.cu — the linear layer on an FP8 checkpoint's e4m3 weights kept packed (fp8.h
// through Gemm::linear): both paths (packed GEMV up to 8 rows, packed tensor-core tiles
// beyond, packed_gemm.h), both compute types and both outputs, with 128x128 block scales (the
// last block partial), per-channel and per-tensor scales, against the CPU backend's
// matmul on the same tensor; the fused gate+up+SwiGLU decode (gate_up_check.h) on gate
// and up parts with their own scale grids, as DeviceWeights holds them; under the emulator, the bytes each Llama-3.1-8B decode GEMV
// reads against its packed weights and scales plus activations (limit 1.03).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/fp8.h"
#include "engine/backend/cuda/gemm.h"
#include "engine/util/splitmix.h"
#include "tests/gpu/gate_up_check.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/packed_linear_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
using cuda::Gemm;
using cuda::GemmOut;
using cuda::GemmPath;
using cuda::HalfType;

const char* kCheck = "fp8";

// A random FP8 matrix [n, k]: every e4m3 byte but the NaNs, scales of a few magnitudes
// on the grid of block_rows x block_cols blocks.
struct HostFp8 {
  std::vector<uint8_t> q;
  std::vector<float> scales;
  Tensor tensor;
};
HostFp8 random_fp8(int32_t n, int32_t k, int64_t block_rows, int64_t block_cols, uint64_t seed) {
  HostFp8 h;
  h.q.resize(size_t(n) * k);
  for (size_t i = 0; i < h.q.size(); ++i) {
    const uint8_t b = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
    h.q[i] = (b & 0x7F) == 0x7F ? uint8_t(b ^ 1) : b;
  }
  h.tensor.name = "w";
  h.tensor.dtype = DType::F8_E4M3;
  h.tensor.shape = {n, k};
  h.tensor.data = h.q.data();
  h.tensor.nbytes = h.q.size();
  h.tensor.scale_block_rows = block_rows;
  h.tensor.scale_block_cols = block_cols;
  h.scales.resize(size_t(h.tensor.scale_grid_rows() * h.tensor.scale_grid_cols()));
  for (size_t i = 0; i < h.scales.size(); ++i)
    h.scales[i] = (0.5f + float(splitmix64(seed + i) >> 40) / 16777216.0f) * (i % 3 == 0 ? 4.0f : 1.0f) / 448.0f;
  h.tensor.scale = h.scales.data();
  return h;
}

struct DeviceFp8 {
  DeviceArray<uint8_t> q;
  DeviceArray<float> scales;
  cuda::DeviceMatrix matrix;
  explicit DeviceFp8(const Tensor& t) : q(t.nbytes), scales(cuda::fp8_scale_bytes(t) / 4) {
    cuda::upload_fp8(t, q.get(), scales.get());
    matrix = cuda::DeviceMatrix{cuda::WeightFormat::FP8, q.get(), scales.get()};
    matrix.scale_block_rows = int32_t(t.scale_block_rows);
    matrix.scale_block_cols = int32_t(t.scale_block_cols);
  }
};

// As check_q8_0: the GEMV multiplies exact weights in f32; the tile path rounds each
// decoded weight to 16 bits (BF16; FP16 holds e4m3 * scale closer), and a 16-bit y rounds
// once more.
template <typename T>
void check_shape(Gemm& gemm, const char* name, int32_t k, int32_t n, int64_t block_rows, int64_t block_cols,
                 const std::vector<int32_t>& row_counts, cudaStream_t stream, uint64_t seed) {
  const HostFp8 host = random_fp8(n, k, block_rows, block_cols, seed);
  const DeviceFp8 w(host.tensor);
  check_packed_linear<T>(kCheck, gemm, name, w.matrix, host.tensor, row_counts, stream, seed,
                         [](GemmPath path, GemmOut out) {
                           const bool exact_w = path == GemmPath::GEMV || std::is_same_v<T, f16>;
                           return out == GemmOut::F32 && exact_w ? 1e-3 : 1e-2;
                         });
}

// The dense MLP's fused gate+up+SwiGLU decode on FP8 gate and up matrices [inter, k] each,
// chained as DeviceWeights holds them (each part its own scale grid), at each of `rows` in
// BF16 and the last in FP16; with `bytes`, BF16 only with the byte row.
void check_gate_up_fp8(const char* name, int32_t k, int32_t inter, int64_t block_rows, int64_t block_cols,
                       const std::vector<int32_t>& rows, cudaStream_t stream, uint64_t seed, bool bytes = false) {
  const HostFp8 gate = random_fp8(inter, k, block_rows, block_cols, seed), up = random_fp8(inter, k, block_rows, block_cols, seed + 1);
  const DeviceFp8 dg(gate.tensor), du(up.tensor);
  cuda::DeviceMatrix w = dg.matrix;
  w.rows = inter;
  w.tail = &du.matrix;
  const GateUpProduct product =
      interleaved([&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, gate.tensor); },
                  [&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, up.tensor); }, inter);
  const double packed = bytes ? double(2 * gate.tensor.nbytes + 2 * cuda::fp8_scale_bytes(gate.tensor)) : 0;
  for (int32_t r : rows) check_gate_up<bf16>(kCheck, name, w, k, inter, r, product, stream, seed + uint64_t(r), packed);
  if (!bytes) check_gate_up<f16>(kCheck, name, w, k, inter, rows.back(), product, stream, seed);
}

#if SPARK_CUDA_EMU
// Bytes a decode step's linear layer reads (emulator accounting, linear_byte_ratio) over
// its e4m3 weights and scales, with 128x128 block scales as Qwen3-FP8 ships them.
void byte_ratio(const char* name, int32_t k, int32_t n, int32_t rows, cudaStream_t stream, uint64_t seed) {
  const HostFp8 host = random_fp8(n, k, 128, 128, seed);
  const DeviceFp8 w(host.tensor);
  linear_byte_ratio(kCheck, name, w.matrix, host.tensor,
                    double(host.tensor.nbytes) + double(cuda::fp8_scale_bytes(host.tensor)), rows, stream, seed);
}
#endif

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Gemm gemm;
    const std::vector<int32_t> rows = {1, 3, 8, 16, 64};
    // odd: k = 1040 (8 whole 128-column blocks and a partial one of 16; a warp step of 512
    // values, then one with one lane in 32 busy), n = 1001 (7 whole 128-row blocks).
    check_shape<bf16>(gemm, "block128 odd", 1040, 1001, 128, 128, rows, stream, 1);
    check_shape<f16>(gemm, "block128 odd", 1040, 1001, 128, 128, {1, 8, 16}, stream, 2);
    check_shape<bf16>(gemm, "channel odd", 1040, 1001, 1, 1040, {1, 8, 64}, stream, 3);
    check_shape<f16>(gemm, "tensor", 512, 200, 200, 512, {1, 3, 16}, stream, 4);
    check_shape<f16>(gemm, "block128 tiny", 256, 48, 128, 128, {2, 512}, stream, 5);
    check_gate_up_fp8("FP8 block128 odd", 1040, 501, 128, 128, {1, 3, 8}, stream, 6);
    check_gate_up_fp8("FP8 channel odd", 1040, 501, 1, 1040, {1, 8}, stream, 7);
#if SPARK_CUDA_EMU
    byte_ratio("qkv", 4096, 6144, 1, stream, 11);
    byte_ratio("o", 4096, 4096, 8, stream, 12);
    byte_ratio("o", 4096, 4096, 16, stream, 12);
    check_gate_up_fp8("FP8 block128", 4096, 14336, 128, 128, {1}, stream, 13, true);
    byte_ratio("down", 14336, 4096, 1, stream, 14);
    byte_ratio("down", 14336, 4096, 64, stream, 14);
#endif
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("fp8", [] { spark::gpu_check::run(); });
}
