// check_blocks.cu — the linear layer on GGUF blocks kept packed as the file stores them
// (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; block_formats.h, through Gemm::linear): both paths
// (packed GEMV up to 8 rows, packed tensor-core tiles beyond, packed_gemm.h), both compute
// types and both outputs against the CPU backend's matmul on the same blocks; a chained
// matrix mixing formats (Q4_K_M's q/k/v); the fused gate+up+SwiGLU decode
// (gate_up_check.h); the embedding gather against the loader's dequantization; under the
// emulator, the bytes Llama-3.1-8B's linear layers read in decode steps of 1..64 rows
// against their packed weights (linear_byte_ratio); the memory plan's bytes for an 8B
// Q4_K_M model against the file's.
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

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/gemm.h"
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
using cuda::WeightFormat;

const char* kCheck = "blocks";

DType dtype_of(WeightFormat f) {
  switch (f) {
    case WeightFormat::Q4_0: return DType::Q4_0;
    case WeightFormat::Q4_1: return DType::Q4_1;
    case WeightFormat::Q4_K: return DType::Q4_K;
    case WeightFormat::Q5_K: return DType::Q5_K;
    case WeightFormat::Q6_K: return DType::Q6_K;
    case WeightFormat::Q5_0: return DType::Q5_0;
    case WeightFormat::Q5_1: return DType::Q5_1;
    default: return DType::Q8_0;
  }
}

void put_half(uint8_t* p, float v) {
  const f16 h = __float2half(v);
  std::memcpy(p, &h, 2);
}

// A random [n, k] matrix of format f in GGUF blocks: every quant, scale and high bit
// random; the half-float fields (d, dmin, m) finite, of a few magnitudes.
struct HostBlocks {
  std::vector<uint8_t> bytes;
  Tensor tensor;
};
HostBlocks random_blocks(WeightFormat f, int32_t n, int32_t k, uint64_t seed) {
  const DType t = dtype_of(f);
  const int64_t block_bytes = dtype_block_bytes(t), per_row = k / dtype_block_elems(t);
  HostBlocks h;
  h.bytes.resize(size_t(n * per_row * block_bytes));
  for (size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
  for (int64_t b = 0; b < n * per_row; ++b) {
    uint8_t* block = h.bytes.data() + b * block_bytes;
    const uint64_t r = splitmix64(seed + uint64_t(b) * 7919);
    const float scale = (0.5f + float(r >> 40) / 16777216.0f) * (b % 7 == 0 ? 4.0f : 1.0f);
    switch (f) {
      case WeightFormat::Q4_0: put_half(block, scale / 8); break;
      case WeightFormat::Q4_1: put_half(block, scale / 16), put_half(block + 2, -scale / 2); break;
      case WeightFormat::Q5_0: put_half(block, scale / 16); break;
      case WeightFormat::Q5_1: put_half(block, scale / 32), put_half(block + 2, -scale / 2); break;
      case WeightFormat::Q4_K:
      case WeightFormat::Q5_K: put_half(block, scale / 512), put_half(block + 2, scale / 1024); break;
      case WeightFormat::Q6_K: put_half(block + 208, scale / 2048); break;
      default: break;
    }
  }
  h.tensor.name = "w";
  h.tensor.dtype = t;
  h.tensor.shape = {n, k};
  h.tensor.data = h.bytes.data();
  h.tensor.nbytes = h.bytes.size();
  return h;
}

// The packed matrix on the device, uploaded as DeviceWeights does.
struct DeviceBlocks {
  DeviceArray<uint8_t> data;
  cuda::DeviceMatrix matrix;
  DeviceBlocks(WeightFormat f, const Tensor& t) : data(t.nbytes) {
    cuda::upload_blocks(t, data.get());
    matrix = cuda::DeviceMatrix{f, data.get()};
  }
};

std::string shape_name(WeightFormat f, const char* name, int32_t rows, int32_t k, int32_t n) {
  return std::string(cuda::weight_format_name(f)) + " " + name + " r=" + std::to_string(rows) +
         " k=" + std::to_string(k) + " n=" + std::to_string(n);
}

// y = x · wᵀ on both paths and outputs against the CPU; `matrix` may be a chain whose
// rows are `ref`'s.
template <typename T>
void check_linear(Gemm& gemm, const std::string& name, const cuda::DeviceMatrix& matrix,
                  const std::vector<const Tensor*>& ref, int32_t k, int32_t rows, cudaStream_t stream, uint64_t seed) {
  int32_t n = 0;
  for (const Tensor* t : ref) n += int32_t(t->rows());
  const std::vector<float> xf = round_half<T>(random_floats(size_t(rows) * k, seed * 131 + uint64_t(rows)));
  DeviceArray<T> x(to_half<T>(xf));
  std::vector<float> expect(size_t(rows) * n);
  int32_t n0 = 0;
  for (const Tensor* t : ref) {
    const std::vector<float> part = cpu_product(xf, rows, *t);
    for (int32_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < t->rows(); ++c) expect[size_t(r) * n + n0 + c] = part[size_t(r * t->rows() + c)];
    n0 += int32_t(t->rows());
  }
  DeviceArray<float> y32(size_t(rows) * n);
  DeviceArray<T> y16(size_t(rows) * n);
  for (GemmPath path : {GemmPath::GEMV, GemmPath::CUBLASLT}) {
    if (path == GemmPath::GEMV && rows > cuda::kGemvMaxRows) continue;
    for (GemmOut out : {GemmOut::HALF, GemmOut::F32}) {
      y32.poison();
      y16.poison();
      void* y = out == GemmOut::F32 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
      gemm.linear(half_type_of<T>(), x.get(), rows, k, matrix, n, y, out, stream, path);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> got = out == GemmOut::F32 ? y32.download() : from_half(y16.download());
      // The GEMV multiplies the exact weights in f32; the tile path rounds each
      // decoded weight to 16 bits first (2^-9 relative for bf16), and a 16-bit y
      // rounds once more.
      const bool exact_w = path == GemmPath::GEMV || std::is_same_v<T, f16>;
      const double limit = out == GemmOut::F32 && exact_w ? 1e-3 : 1e-2;
      error_row(kCheck,
                name + (path == GemmPath::GEMV ? " gemv " : " tiles ") + half_name<T>() +
                    (out == GemmOut::F32 ? "->f32" : "->half"),
                rel_error(expect, got), limit);
    }
  }
}

template <typename T>
void check_shape(Gemm& gemm, WeightFormat f, const char* name, int32_t k, int32_t n,
                 const std::vector<int32_t>& row_counts, cudaStream_t stream, uint64_t seed) {
  const HostBlocks host = random_blocks(f, n, k, seed);
  const DeviceBlocks w(f, host.tensor);
  for (int32_t rows : row_counts)
    check_linear<T>(gemm, shape_name(f, name, rows, k, n), w.matrix, {&host.tensor}, k, rows, stream, seed);
}

// Q4_K_M's fused q/k/v in the layers where v is Q6_K: a chain of a Q4_K part (q and k),
// a Q6_K part (v), and, for the chain's sake, a Q8_0 tail.
void check_chain(Gemm& gemm, cudaStream_t stream) {
  const int32_t k = 512;
  const HostBlocks qk = random_blocks(WeightFormat::Q4_K, 96, k, 21), v = random_blocks(WeightFormat::Q6_K, 32, k, 22);
  std::vector<BlockQ8_0> q8(size_t(48) * (k / 32));
  for (size_t b = 0; b < q8.size(); ++b) {
    put_half(reinterpret_cast<uint8_t*>(&q8[b].d), 0.01f + float(b % 5) * 0.002f);
    for (int j = 0; j < 32; ++j) q8[b].qs[j] = int8_t(splitmix64(b * 32 + uint64_t(j)) & 0xFF);
  }
  Tensor q8t;
  q8t.name = "w";
  q8t.dtype = DType::Q8_0;
  q8t.shape = {48, k};
  q8t.data = q8.data();
  q8t.nbytes = q8.size() * sizeof(BlockQ8_0);
  const DeviceBlocks dqk(WeightFormat::Q4_K, qk.tensor), dv(WeightFormat::Q6_K, v.tensor);
  DeviceArray<int8_t> q8_qs(size_t(48) * k);
  DeviceArray<uint16_t> q8_scales(size_t(48) * (k / 32));
  cuda::upload_q8_0(q8t, q8_qs.get(), q8_scales.get());
  const cuda::DeviceMatrix tail2{WeightFormat::Q8_0, q8_qs.get(), q8_scales.get(), 0, nullptr};
  const cuda::DeviceMatrix tail1{WeightFormat::Q6_K, dv.data.get(), nullptr, 32, &tail2};
  const cuda::DeviceMatrix head{WeightFormat::Q4_K, dqk.data.get(), nullptr, 96, &tail1};
  for (int32_t rows : {1, 5, 24})
    check_linear<bf16>(gemm, "chain Q4_K+Q6_K+Q8_0 r=" + std::to_string(rows) + " k=512 n=176", head,
                       {&qk.tensor, &v.tensor, &q8t}, k, rows, stream, 23);
}

// The dense MLP's fused gate+up+SwiGLU decode on a [2 * inter, k] matrix of format f, at
// each of `rows` in BF16 and the last in FP16; with `bytes`, BF16 only with the byte row.
void check_gate_up_format(WeightFormat f, int32_t k, int32_t inter, const std::vector<int32_t>& rows,
                          cudaStream_t stream, uint64_t seed, bool bytes = false) {
  const HostBlocks host = random_blocks(f, 2 * inter, k, seed);
  const DeviceBlocks w(f, host.tensor);
  const GateUpProduct product = [&](const std::vector<float>& x, int32_t r) { return cpu_product(x, r, host.tensor); };
  const std::string name = cuda::weight_format_name(f);
  for (int32_t r : rows)
    check_gate_up<bf16>(kCheck, name, w.matrix, k, inter, r, product, stream, seed + uint64_t(r),
                        bytes ? double(host.tensor.nbytes) : 0);
  if (!bytes) check_gate_up<f16>(kCheck, name, w.matrix, k, inter, rows.back(), product, stream, seed);
}

// Token rows gathered from a packed table (one id out of range: zeros) against the
// loader's dequantization.
void check_embedding(WeightFormat f, int32_t hidden, cudaStream_t stream) {
  const int32_t vocab = 50;
  const HostBlocks host = random_blocks(f, vocab, hidden, 31);
  const DeviceBlocks w(f, host.tensor);
  const std::vector<int32_t> ids = {0, 49, 7, 50, 7, 23};
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> out(ids.size() * size_t(hidden));
  out.poison();
  cuda::embedding_gather_blocks(f, d_ids.get(), int32_t(ids.size()), w.data.get(), vocab, hidden, out.get(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> expect(ids.size() * size_t(hidden), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < vocab) dequantize_tensor_row(host.tensor, ids[t], expect.data() + t * hidden);
  error_row(kCheck, std::string(cuda::weight_format_name(f)) + " embedding gather hidden=" + std::to_string(hidden),
            rel_error(expect, out.download()), 0.0);
}

// The memory plan's device bytes for Llama-3.1-8B in Q4_K_M (llama.cpp's mix: v, down
// and the output matrix in Q6_K, every other matrix Q4_K, norms f32) against the bytes of
// those tensors in such a file (dtype_nbytes, the loader's rule).
void plan_bytes() {
  Config c = config_for_model("tests/golden/configs/llama3_8b");
  c.model.load_format = "dummy";
  const ModelSpec spec = inspect_model(c).spec;
  const StoredDType stored = [](Part p, int64_t) {
    if (part_is_norm(p)) return DType::F32;
    return p == Part::V || p == Part::DOWN || p == Part::LM_HEAD ? DType::Q6_K : DType::Q4_K;
  };
  uint64_t file_bytes = 0;
  for (const TensorSpec& t : expected_tensors(spec, full_range(spec))) {
    int64_t elems = 1;
    for (int64_t d : t.shape) elems *= d;
    file_bytes += dtype_nbytes(stored(t.part, 0), elems, t.shape.back());
  }
  const double ratio = double(CudaBackend::weight_bytes(spec, full_range(spec), stored)) / double(file_bytes);
  row(kCheck, "memory plan 8B Q4_K_M: device / file weight bytes",
      fmt("%.4f", ratio) + fmt(" (%.2f GB file)", file_bytes / 1e9), "<= 1.02", ratio >= 1.0 && ratio <= 1.02);
}

#if SPARK_CUDA_EMU
// Bytes a decode step's linear layer reads (emulator accounting, linear_byte_ratio) over
// what it must read.
void byte_ratio(WeightFormat f, const char* name, int32_t k, int32_t n, int32_t rows, cudaStream_t stream,
                uint64_t seed) {
  const HostBlocks host = random_blocks(f, n, k, seed);
  const DeviceBlocks w(f, host.tensor);
  linear_byte_ratio(kCheck, std::string(cuda::weight_format_name(f)) + " " + name, w.matrix, host.tensor,
                    double(host.tensor.nbytes), rows, stream, seed);
}
#endif

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Gemm gemm;
    // Tiles: 16 rows for 1..16 (split k at every size here), 64 for 24 and 64, the prefill
    // tile (128 x 128, two stages) for 512 and a 4,096-token prefill.
    const std::vector<int32_t> rows = {1, 3, 8, 24, 64};  // 16 in FP16 below
    const WeightFormat kquants[] = {WeightFormat::Q4_K, WeightFormat::Q6_K, WeightFormat::Q5_K};
    const WeightFormat small[] = {WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q5_0, WeightFormat::Q5_1};
    uint64_t seed = 1;
    // odd: five super-blocks a row (a warp step of four, then one with 8 of 32 lanes
    // busy), n % 16 = 9; the small blocks' k = 1056 is no multiple of 256 either.
    for (WeightFormat f : kquants) {
      check_shape<bf16>(gemm, f, "odd", 1280, 1001, rows, stream, seed++);
      check_shape<f16>(gemm, f, "odd", 1280, 1001, {1, 8, 16}, stream, seed++);
      check_shape<f16>(gemm, f, "tiny", 256, 48, {2, 512, 4096}, stream, seed++);
      check_gate_up_format(f, 1280, 501, {1, 3, 8}, stream, seed++);
      check_embedding(f, 512, stream);
    }
    for (WeightFormat f : small) {
      check_shape<bf16>(gemm, f, "odd", 1056, 1001, rows, stream, seed++);
      check_shape<f16>(gemm, f, "odd", 1056, 1001, {1, 8, 16}, stream, seed++);
      check_shape<f16>(gemm, f, "tiny", 96, 48, {2, 512, 4096}, stream, seed++);
      check_gate_up_format(f, 1056, 501, {1, 3, 8}, stream, seed++);
      check_embedding(f, 96, stream);
    }
    check_chain(gemm, stream);
    plan_bytes();
#if SPARK_CUDA_EMU
    // Llama-3.1-8B's decode GEMVs (q/k/v fused, o, down) and its fused gate+up+SwiGLU in
    // Q4_K_M's two formats; the o projection in the others.
    for (WeightFormat f : {WeightFormat::Q4_K, WeightFormat::Q6_K}) {
      byte_ratio(f, "qkv", 4096, 6144, 1, stream, 11);
      byte_ratio(f, "o", 4096, 4096, 8, stream, 12);
      byte_ratio(f, "o", 4096, 4096, 16, stream, 12);
      check_gate_up_format(f, 4096, 14336, {1}, stream, 13, true);
      byte_ratio(f, "down", 14336, 4096, 1, stream, 14);
    }
    for (WeightFormat f : {WeightFormat::Q5_K, WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q5_0, WeightFormat::Q5_1})
      byte_ratio(f, "o", 4096, 4096, 1, stream, 15);
    byte_ratio(WeightFormat::Q4_K, "down", 14336, 4096, 64, stream, 16);
#else
    // Llama-3.1-8B's o and down projections in Q4_K_M's formats, batches of 1 to 64.
    for (WeightFormat f : {WeightFormat::Q4_K, WeightFormat::Q6_K})
      for (auto [name, k, n] : {std::tuple{"o", 4096, 4096}, std::tuple{"down", 14336, 4096}}) {
        const HostBlocks host = random_blocks(f, n, k, 17);
        bench_packed_linear<DeviceBlocks>(kCheck, std::string("8B ") + cuda::weight_format_name(f) + " " + name, k,
                                          n, double(host.tensor.nbytes),
                                          [&] { return std::make_unique<DeviceBlocks>(f, host.tensor); }, stream);
      }
#endif
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("blocks", [] { spark::gpu_check::run(); });
}
