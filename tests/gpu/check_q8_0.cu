// check_q8_0.cu — the Q8_0 linear layer on packed weights (q8_0.h through Gemm::linear):
// both paths (packed GEMV up to 8 rows, packed tensor-core tiles beyond, packed_gemm.h),
// both compute types and both outputs against the CPU backend's matmul on the same
// blocks, and, under the emulator, the bytes each Llama-3.1-8B decode GEMV reads against
// its packed weights plus activations (limit 1.03); the memory plan's bytes for an 8B
// Q8_0 model against the file's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/q8_0.h"
#include "engine/config.h"
#include "engine/model/arch.h"
#include "engine/model/model_loader.h"
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

const char* kCheck = "q8_0";

// A random Q8_0 matrix [n, k] in GGUF blocks: quants over the whole int8 range (never an
// all-zero block), scales of a few magnitudes.
struct HostQ8 {
  std::vector<BlockQ8_0> blocks;
  Tensor tensor;
};
HostQ8 random_q8_0(int32_t n, int32_t k, uint64_t seed) {
  HostQ8 h;
  h.blocks.resize(size_t(n) * size_t(k / 32));
  for (size_t b = 0; b < h.blocks.size(); ++b) {
    const uint64_t r = splitmix64(seed * 0x9E3779B97F4A7C15ull + b);
    const float scale = (0.5f + float(r >> 40) / 16777216.0f) * (b % 7 == 0 ? 4.0f : 1.0f) / 127.0f;
    const f16 d = __float2half(scale);
    std::memcpy(&h.blocks[b].d, &d, 2);
    for (int j = 0; j < 32; ++j) {
      const int8_t q = int8_t(splitmix64(r + uint64_t(j) + 1) & 0xFF);
      h.blocks[b].qs[j] = q == 0 ? int8_t(j + 1) : q;
    }
  }
  h.tensor.name = "w";
  h.tensor.dtype = DType::Q8_0;
  h.tensor.shape = {n, k};
  h.tensor.data = h.blocks.data();
  h.tensor.nbytes = h.blocks.size() * sizeof(BlockQ8_0);
  return h;
}

// The packed matrix on the device, uploaded as DeviceWeights does.
struct DeviceQ8 {
  DeviceArray<int8_t> qs;
  DeviceArray<uint16_t> scales;
  cuda::DeviceMatrix matrix;
  DeviceQ8(const Tensor& t)
      : qs(size_t(t.numel())), scales(size_t(t.numel() / 32)) {
    cuda::upload_q8_0(t, qs.get(), scales.get());
    matrix = cuda::DeviceMatrix{cuda::WeightFormat::Q8_0, qs.get(), scales.get()};
  }
};


// The GEMV multiplies the exact weights in f32; the tile path rounds each decoded weight
// to 16 bits first (2^-9 relative for bf16), and a 16-bit y rounds once more.
template <typename T>
void check_shape(Gemm& gemm, const char* name, int32_t k, int32_t n, const std::vector<int32_t>& row_counts,
                 cudaStream_t stream, uint64_t seed) {
  const HostQ8 host = random_q8_0(n, k, seed);
  const DeviceQ8 w(host.tensor);
  check_packed_linear<T>(kCheck, gemm, name, w.matrix, host.tensor, row_counts, stream, seed,
                         [](GemmPath path, GemmOut out) {
                           const bool exact_w = path == GemmPath::GEMV || std::is_same_v<T, f16>;
                           return out == GemmOut::F32 && exact_w ? 1e-3 : half_limit<T>();
                         });
}

// The memory plan's device bytes for Llama-3.1-8B in Q8_0 (every matrix Q8_0, norms f32)
// against the bytes of those tensors in such a file (dtype_nbytes, the loader's rule).
void plan_bytes() {
  Config c = config_for_model("tests/golden/configs/llama3_8b");
  c.model.load_format = "dummy";
  const ModelSpec spec = inspect_model(c).spec;
  uint64_t file_bytes = 0;
  for (const TensorSpec& t : expected_tensors(spec, full_range(spec))) {
    int64_t elems = 1;
    for (int64_t d : t.shape) elems *= d;
    file_bytes += dtype_nbytes(part_is_norm(t.part) ? DType::F32 : DType::Q8_0, elems, t.shape.back());
  }
  const StoredDType stored = [](Part p, int64_t) { return part_is_norm(p) ? DType::F32 : DType::Q8_0; };
  const double ratio = double(CudaBackend::weight_bytes(spec, full_range(spec), stored)) / double(file_bytes);
  row(kCheck, "memory plan 8B Q8_0: device / file weight bytes", fmt("%.4f", ratio) + fmt(" (%.2f GB file)", file_bytes / 1e9),
      "<= 1.02", ratio >= 1.0 && ratio <= 1.02);
}

size_t packed_bytes(int64_t n, int64_t k) { return size_t(n * k + n * (k / 32) * 2); }

// The dense MLP's fused gate+up+SwiGLU decode on a [2 * inter, k] Q8_0 matrix, at each of
// `rows` in BF16 and the last in FP16; with `bytes`, BF16 only with the byte row.
void check_gate_up_q8_0(int32_t k, int32_t inter, const std::vector<int32_t>& rows, cudaStream_t stream,
                        uint64_t seed, bool bytes = false) {
  const HostQ8 host = random_q8_0(2 * inter, k, seed);
  const DeviceQ8 w(host.tensor);
  const GateUpProduct product = [&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, host.tensor); };
  for (int32_t r : rows)
    check_gate_up<bf16>(kCheck, "Q8_0", w.matrix, k, inter, r, product, stream, seed + uint64_t(r),
                        bytes ? double(packed_bytes(2 * inter, k)) : 0);
  if (!bytes) check_gate_up<f16>(kCheck, "Q8_0", w.matrix, k, inter, rows.back(), product, stream, seed);
}

#if SPARK_CUDA_EMU

// Bytes a decode step's linear layer reads (emulator accounting, linear_byte_ratio) over
// what it must read.
void byte_ratio(const char* name, int32_t k, int32_t n, int32_t rows, cudaStream_t stream, uint64_t seed) {
  const HostQ8 host = random_q8_0(n, k, seed);
  const DeviceQ8 w(host.tensor);
  linear_byte_ratio(kCheck, name, w.matrix, host.tensor, double(packed_bytes(n, k)), rows, stream, seed);
}
#endif

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Gemm gemm;
    // The row tiles (packed_gemm.h): 16 rows for 1..16 (k split here), 64 for 24 and 64.
    const std::vector<int32_t> rows = {1, 3, 8, 24, 64};
    // odd: k % 512 = 32 (a warp step with one lane in 16 busy), n % 16 = 9.
    check_shape<bf16>(gemm, "odd", 1056, 1001, rows, stream, 1);
    check_shape<f16>(gemm, "odd", 1056, 1001, {1, 8, 16}, stream, 2);
    // The 8B shape on the GEMV's row counts only: tiles of it take minutes emulated.
    check_shape<bf16>(gemm, "8B o", 4096, 4096, {1, 3, 8}, stream, 3);
    check_shape<f16>(gemm, "tiny", 128, 64, rows, stream, 4);
    check_gate_up_q8_0(1056, 501, {1, 3, 8}, stream, 5);
    plan_bytes();
#if SPARK_CUDA_EMU
    // Llama-3.1-8B's decode GEMVs (q/k/v fused, o, down) and its fused gate+up+SwiGLU.
    byte_ratio("qkv", 4096, 6144, 1, stream, 11);
    byte_ratio("o", 4096, 4096, 1, stream, 12);
    byte_ratio("o", 4096, 4096, 8, stream, 13);
    byte_ratio("o", 4096, 4096, 16, stream, 13);
    check_gate_up_q8_0(4096, 14336, {1}, stream, 14, true);
    byte_ratio("down", 14336, 4096, 1, stream, 15);
    byte_ratio("down", 14336, 4096, 64, stream, 15);
#else
    // Llama-3.1-8B's o and down projections in Q8_0, batches of 1 to 64.
    for (auto [name, k, n] : {std::tuple{"o", 4096, 4096}, std::tuple{"down", 14336, 4096}}) {
      const HostQ8 host = random_q8_0(n, k, 17);
      bench_packed_linear<DeviceQ8>(kCheck, std::string("8B Q8_0 ") + name, k, n, double(packed_bytes(n, k)),
                                    [&] { return std::make_unique<DeviceQ8>(host.tensor); }, stream);
    }
#endif
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("q8_0", [] { spark::gpu_check::run(); });
}
