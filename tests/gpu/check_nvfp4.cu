// check_nvfp4.cu — the linear layer on NVFP4 weights kept packed (nvfp4.h through
// Gemm::linear): both paths (packed GEMV up to 8 rows, packed tensor-core tiles beyond,
// packed_gemm.h), both compute types and both outputs, at odd shapes (a partial warp step,
// rows not a multiple of the tile), against the CPU backend's matmul on the same tensor;
// the fused gate+up+SwiGLU decode (gate_up_check.h) on gate and up parts with their own
// scales in one matrix, as DeviceWeights holds them; under the emulator, the bytes each
// Llama-3.1-8B decode GEMV reads against its packed blocks and row scales plus
// activations (limit 1.03).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/nvfp4.h"
#include "engine/model/quant.h"
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

const char* kCheck = "nvfp4";

// A random NVFP4 matrix [n, k]: every code, sub-block scales of every positive E4M3 value
// but NaN (0x7F), a tensor scale as ModelOpt's weight_scale_2 (amax / (6 * 448)).
struct HostNvfp4 {
  std::vector<uint8_t> blocks;
  float scale = 0;
  Tensor tensor;
};
HostNvfp4 random_nvfp4(int32_t n, int32_t k, uint64_t seed) {
  HostNvfp4 h;
  h.blocks.resize(size_t(n) * size_t(cuda::nvfp4_row_bytes(k)));
  for (size_t i = 0; i < h.blocks.size(); ++i) {
    const uint8_t b = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
    // Scale bytes (the first 4 of each 36): positive, not NaN, around 1 (0x30..0x47: 0.5..2.75).
    h.blocks[i] = i % sizeof(BlockNVFP4) < 4 ? uint8_t(0x30 + b % 24) : b;
  }
  h.scale = (0.5f + float(splitmix64(seed) >> 40) / 16777216.0f) / (6.0f * 448.0f);
  h.tensor.name = "w";
  h.tensor.dtype = DType::NVFP4;
  h.tensor.shape = {n, k};
  h.tensor.data = h.blocks.data();
  h.tensor.nbytes = h.blocks.size();
  h.tensor.scale = &h.scale;
  h.tensor.scale_block_rows = n;
  h.tensor.scale_block_cols = k;
  return h;
}

// Matrices stacked along rows in one device matrix, each row with its tensor's scale.
struct DeviceNvfp4 {
  DeviceArray<uint8_t> bytes;
  cuda::DeviceMatrix matrix;
  DeviceNvfp4(const std::vector<const Tensor*>& parts, int32_t rows, int32_t k) : bytes(cuda::nvfp4_bytes(rows, k)) {
    auto* scales = reinterpret_cast<float*>(bytes.get() + cuda::nvfp4_scales_offset(rows, k));
    int64_t row0 = 0;
    for (const Tensor* t : parts) {
      cuda::upload_nvfp4(*t, bytes.get() + row0 * cuda::nvfp4_row_bytes(k), scales + row0);
      row0 += t->rows();
    }
    matrix = cuda::DeviceMatrix{cuda::WeightFormat::NVFP4, bytes.get(), scales};
  }
};

// Both paths multiply exact weights: e2m1 * e4m3 has at most 5 significant bits, so the
// tiles' 16-bit copies hold it exactly too, and the row's scale multiplies the sum
// (weight_readers.cuh's row_scale). f32 sums in another order than the CPU's; a 16-bit y
// rounds once more.
template <typename T>
void check_shape(Gemm& gemm, const char* name, int32_t k, int32_t n, const std::vector<int32_t>& row_counts,
                 cudaStream_t stream, uint64_t seed) {
  const HostNvfp4 host = random_nvfp4(n, k, seed);
  const DeviceNvfp4 w({&host.tensor}, n, k);
  check_packed_linear<T>(kCheck, gemm, name, w.matrix, host.tensor, row_counts, stream, seed,
                         [](GemmPath, GemmOut out) { return out == GemmOut::F32 ? 1e-5 : 1e-2; });
}

// The dense MLP's fused gate+up+SwiGLU decode on NVFP4 gate and up matrices [inter, k]
// each, one device matrix with each part's scale on its rows; with `bytes`, BF16 only with
// the byte row.
void check_gate_up_nvfp4(const char* name, int32_t k, int32_t inter, const std::vector<int32_t>& rows,
                         cudaStream_t stream, uint64_t seed, bool bytes = false) {
  const HostNvfp4 gate = random_nvfp4(inter, k, seed), up = random_nvfp4(inter, k, seed + 1);
  const DeviceNvfp4 w({&gate.tensor, &up.tensor}, 2 * inter, k);
  const GateUpProduct product =
      interleaved([&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, gate.tensor); },
                  [&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, up.tensor); }, inter);
  const double packed = bytes ? double(2 * gate.tensor.nbytes) + 2.0 * 4 * inter : 0;
  for (int32_t r : rows)
    check_gate_up<bf16>(kCheck, name, w.matrix, k, inter, r, product, stream, seed + uint64_t(r), packed);
  if (!bytes) check_gate_up<f16>(kCheck, name, w.matrix, k, inter, rows.back(), product, stream, seed);
}

// A matrix in ModelOpt's layout, as a checkpoint loads (Tensor::modelopt_block_scales):
// random codes and E4M3 block scales, repacked into GGUF's blocks on upload a band of rows
// at a time (n x k large enough for several 32 MiB bands), against the CPU backend reading
// the same tensor a row at a time.
void check_modelopt_upload(int32_t k, int32_t n, cudaStream_t stream, uint64_t seed) {
  std::vector<uint8_t> codes(size_t(n) * k / 2), scales(size_t(n) * k / 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(0x30 + splitmix64(seed + i) % 24);
  float scale = 1.0f / (6.0f * 448.0f);
  Tensor t;
  t.name = "w";
  t.dtype = DType::NVFP4;
  t.shape = {n, k};
  t.data = codes.data();
  t.modelopt_block_scales = scales.data();
  t.nbytes = size_t(cuda::nvfp4_row_bytes(k)) * size_t(n);
  t.scale = &scale;
  t.scale_block_rows = n;
  t.scale_block_cols = k;
  const DeviceNvfp4 w({&t}, n, k);
  const std::vector<float> xf = round_half<bf16>(random_floats(size_t(k), seed + 7));
  DeviceArray<bf16> x(to_half<bf16>(xf));
  DeviceArray<float> y(static_cast<size_t>(n));
  Gemm gemm;
  gemm.linear(HalfType::BF16, x.get(), 1, k, w.matrix, n, y.get(), GemmOut::F32, stream, GemmPath::GEMV);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  error_row(kCheck,
            "ModelOpt layout repacked on upload (" + std::to_string(t.nbytes >> 20) + " MiB: " +
                std::to_string((t.nbytes + cuda::kUploadChunk - 1) / cuda::kUploadChunk) + " bands) r=1 k=" +
                std::to_string(k) + " n=" + std::to_string(n) + " gemv bf16->f32",
            rel_error(cpu_product(xf, 1, t), y.download()), 1e-5);
}

#if SPARK_CUDA_EMU
// Bytes a decode step's linear layer reads (emulator accounting, linear_byte_ratio) over
// its blocks and row scales.
void byte_ratio(const char* name, int32_t k, int32_t n, int32_t rows, cudaStream_t stream, uint64_t seed) {
  const HostNvfp4 host = random_nvfp4(n, k, seed);
  const DeviceNvfp4 w({&host.tensor}, n, k);
  linear_byte_ratio(kCheck, name, w.matrix, host.tensor, double(host.tensor.nbytes) + 4.0 * n, rows, stream, seed);
}
#endif

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Gemm gemm;
    // odd: k = 1088 (a warp step of 1024 values, then one with two lanes in 32 busy),
    // n = 1001 (not a multiple of the GEMV's 8 rows a block nor of the tiles' 64).
    check_shape<bf16>(gemm, "odd", 1088, 1001, {1, 3, 8, 16, 64}, stream, 1);
    check_shape<f16>(gemm, "odd", 1088, 1001, {1, 8, 16}, stream, 2);
    check_shape<bf16>(gemm, "one block", 64, 37, {1, 2, 9}, stream, 3);
    check_shape<f16>(gemm, "tiny", 256, 48, {2, 512}, stream, 4);
    check_gate_up_nvfp4("NVFP4 odd", 1088, 501, {1, 3, 8}, stream, 5);
    check_modelopt_upload(4096, 20000, stream, 6);
#if SPARK_CUDA_EMU
    byte_ratio("qkv", 4096, 6144, 1, stream, 11);
    byte_ratio("o", 4096, 4096, 8, stream, 12);
    byte_ratio("o", 4096, 4096, 16, stream, 12);
    check_gate_up_nvfp4("NVFP4", 4096, 14336, {1}, stream, 13, true);
    byte_ratio("down", 14336, 4096, 1, stream, 14);
    byte_ratio("down", 14336, 4096, 64, stream, 14);
#endif
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("nvfp4", [] { spark::gpu_check::run(); });
}
