// embedding.cu — the token embedding gather: 16-bit or Q8_0 table rows widened into the f32
// residual; and an encoder's position rows (plus token type 0) gathered beside it. Gathers:
// per row H table values read (2 or 4 bytes each) and 4H bytes written.
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/embedding.h"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 values (one 16-byte load, two 16-byte stores), flat over all rows:
// rows are short (hidden / 8 = 512 chunks for 4096) so a CTA per row would idle lanes
// at small hidden sizes, and the flat grid keeps every SM busy at one token too.
template <typename T>
__global__ void embedding_gather_kernel(const int32_t* __restrict__ token_ids, const T* __restrict__ table,
                                        int64_t vocab, int32_t hidden, int64_t total_chunks, float* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = hidden / 8;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * 8;
  const int64_t id = token_ids[t];
  float v[8];
  if (id >= 0 && id < vocab) {
    load8(table + id * hidden + col, v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = 0.0f;
  }
  float4* dst = reinterpret_cast<float4*>(out + t * hidden + col);
  dst[0] = make_float4(v[0], v[1], v[2], v[3]);
  dst[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// The same from a Q8_0 table (DeviceMatrix, kernel_args.h): one thread per 16 values
// (one 16-byte load of quants, half a block, and its scale), exactly q * d as the CPU does.
__global__ void embedding_gather_q8_0_kernel(const int32_t* __restrict__ token_ids, const int8_t* __restrict__ qs,
                                             const f16* __restrict__ scales, int64_t vocab, int32_t hidden,
                                             int64_t total_chunks, float* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = hidden / 16;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * 16;
  const int64_t id = token_ids[t];
  float v[16];
  if (id >= 0 && id < vocab) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(qs + id * hidden + col));
    const float d = to_f32(scales[(id * hidden + col) / 32]);
    const int8_t* qb = reinterpret_cast<const int8_t*>(&q);
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = float(qb[k]) * d;
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = 0.0f;
  }
  float4* dst = reinterpret_cast<float4*>(out + t * hidden + col);
#pragma unroll
  for (int k = 0; k < 4; ++k) dst[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

// As embedding_gather_kernel: one thread per 8 values, flat over all rows; f32 table rows
// (32 bytes a thread, two 16-byte loads) plus type 0's row, which every row shares (L1/L2).
__global__ void position_rows_kernel(const int32_t* __restrict__ positions, const float* __restrict__ table,
                                     int64_t offset, int64_t table_rows, const float* __restrict__ type0,
                                     int32_t hidden, int64_t total_chunks, float* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = hidden / 8;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * 8;
  const int64_t row = offset + positions[t];
  float p[8] = {}, y[8] = {};
  if (row >= 0 && row < table_rows) load8(table + row * hidden + col, p);
  if (type0) load8(type0 + col, y);
#pragma unroll
  for (int k = 0; k < 8; ++k) p[k] += y[k];
  store8(out + t * hidden + col, p);
}

}  // namespace

void encoder_position_rows(const int32_t* positions, int32_t num_tokens, const float* pos_table, int64_t position_offset,
                           int64_t position_rows, const float* type0, int32_t hidden, float* out, cudaStream_t stream) {
  SPARK_CHECK(num_tokens >= 0 && position_rows > 0 && position_offset >= 0 && hidden > 0 && hidden % 8 == 0,
              "encoder_position_rows: bad sizes");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(pos_table) % 16 == 0 && reinterpret_cast<uintptr_t>(type0) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "encoder_position_rows: tables and out must be 16-byte aligned");
  if (num_tokens == 0) return;
  const int64_t total_chunks = int64_t(num_tokens) * (hidden / 8);
  const auto blocks = unsigned(ceil_div(total_chunks, kThreads));
  position_rows_kernel<<<blocks, kThreads, 0, stream>>>(positions, pos_table, position_offset, position_rows, type0,
                                                        hidden, total_chunks, out);
  CUDA_CHECK_LAUNCH();
}

void embedding_gather_q8_0(const int32_t* token_ids, int32_t num_tokens, const DeviceMatrix& table, int64_t vocab,
                           int32_t hidden, float* out, cudaStream_t stream) {
  SPARK_CHECK(table.format == WeightFormat::Q8_0 && num_tokens >= 0 && vocab > 0 && hidden > 0 && hidden % 32 == 0,
              "embedding_gather_q8_0: not a Q8_0 table of rows of whole blocks");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(table.data) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "embedding_gather_q8_0: table and out must be 16-byte aligned");
  if (num_tokens == 0) return;
  const int64_t total_chunks = int64_t(num_tokens) * (hidden / 16);
  const auto blocks = unsigned(ceil_div(total_chunks, kThreads));
  embedding_gather_q8_0_kernel<<<blocks, kThreads, 0, stream>>>(
      token_ids, static_cast<const int8_t*>(table.data), static_cast<const f16*>(table.scales), vocab, hidden,
      total_chunks, out);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_gather(const int32_t* token_ids, int32_t num_tokens, const T* table, int64_t vocab, int32_t hidden,
                      float* out, cudaStream_t stream) {
  SPARK_CHECK(num_tokens >= 0 && vocab > 0, "embedding_gather: bad sizes");
  SPARK_CHECK(hidden > 0 && hidden % 8 == 0, "embedding_gather: hidden must be a positive multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(table) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "embedding_gather: table and out must be 16-byte aligned");
  if (num_tokens == 0) return;
  const int64_t total_chunks = int64_t(num_tokens) * (hidden / 8);
  const auto blocks = unsigned(ceil_div(total_chunks, kThreads));
  embedding_gather_kernel<T><<<blocks, kThreads, 0, stream>>>(token_ids, table, vocab, hidden, total_chunks, out);
  CUDA_CHECK_LAUNCH();
}

template void embedding_gather<bf16>(const int32_t*, int32_t, const bf16*, int64_t, int32_t, float*, cudaStream_t);
template void embedding_gather<f16>(const int32_t*, int32_t, const f16*, int64_t, int32_t, float*, cudaStream_t);

void embedding_rows(HalfType type, const DeviceMatrix& table, const int32_t* token_ids, int32_t num_tokens,
                    int64_t vocab, int32_t hidden, float* out, cudaStream_t stream) {
  if (table.format == WeightFormat::Q8_0)
    return embedding_gather_q8_0(token_ids, num_tokens, table, vocab, hidden, out, stream);
  if (table.format != WeightFormat::HALF)
    return embedding_gather_blocks(table.format, token_ids, num_tokens, table.data, vocab, hidden, out, stream);
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    embedding_gather<T>(token_ids, num_tokens, static_cast<const T*>(table.data), vocab, hidden, out, stream);
  });
}

}  // namespace spark::cuda
