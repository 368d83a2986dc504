// block_formats.h — linear layers and embeddings over GGUF block formats kept packed on
// the device exactly as the file stores them (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; DeviceMatrix
// in kernel_args.h): the decode GEMV that reads the packed bytes once (many rows go
// through packed_gemm.h), the embedding gather, the upload, and
// the mapping between the file's DType and the device's WeightFormat (Q8_0 included, whose
// kernels are in q8_0.h). The kernels are block_gemv.cuh over block_readers.cuh,
// compiled per format in q4_0.cu, q4_1.cu, q5_0.cu, q5_1.cu, q4_k.cu, q5_k.cu, q6_k.cu (block_gemv.cuh's
// GEMV also serves Q8_0 and FP8, from q8_0.cu and fp8.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/tensor.h"

namespace spark::cuda {

// The packed device format a stored tensor type keeps (Q8_0, the raw-block formats, FP8
// for F8_E4M3, MXFP4: MoE experts only, mxfp4.h; NVFP4, nvfp4.h), or none (16-bit and f32 tensors, which become the compute type).
std::optional<WeightFormat> packed_format(DType t);
// True for the formats whose device layout is the file's blocks as they are (not Q8_0,
// which is split into quants and scales, nor FP8, MXFP4, NVFP4 or HALF).
bool is_raw_block_format(WeightFormat f);
const char* weight_format_name(WeightFormat f);
// Values in one block of a packed format (32 or 256; 16 for FP8): k must be a multiple.
int64_t block_values(WeightFormat f);
// Device bytes of one row of k values in a raw-block format (k / block values x block bytes).
int64_t block_row_bytes(WeightFormat f, int64_t k);

// Runtime dispatch to the per-format launchers below (f a raw-block format).
// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ, x of `type`, f32 accumulation,
// y in `type` or f32; 1 <= rows <= kGemvMaxRows, x 16-byte aligned. Capturable;
// `programmatic` as for gemv (gemv.h).
void gemv_blocks(WeightFormat f, HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n,
                 void* y, int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic = false);
// out[t, hidden] (f32) = row token_ids[t] of the [vocab, hidden] table; zeros for ids
// outside [0, vocab).
void embedding_gather_blocks(WeightFormat f, const int32_t* token_ids, int32_t num_tokens, const void* table,
                             int64_t vocab, int32_t hidden, float* out, cudaStream_t stream);
// Copies the raw-block tensor t to dst (device, t.nbytes bytes) with upload_bytes.
void upload_blocks(const Tensor& t, void* dst);
// The bytes a load copies from the host at once: what it holds beyond the device
// allocation while the file's pages are dropped behind it.
inline constexpr size_t kUploadChunk = size_t(32) << 20;
// Copies `bytes` host bytes (usually a file mapping) to the device a chunk of kUploadChunk
// at a time, dropping each chunk's file pages once copied (release_mapped_pages): on
// unified memory the file then never sits in the page cache beside its device copy.
void upload_bytes(void* dst, const void* src, size_t bytes);
// Splits `count` file blocks of `block_bytes`, each a scale of `scale_bytes` followed by its
// codes (Q8_0, MXFP4), into the codes of every block back to back at `codes` and their
// scales back to back at `scales` (device), so a warp's loads of either coalesce. Host
// buffers stay within kUploadChunk and each chunk's file pages are dropped, as upload_bytes.
void upload_split_blocks(const void* src, int64_t count, size_t block_bytes, size_t scale_bytes, void* codes,
                         void* scales);

template <WeightFormat F>
void gemv_blocks(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic);
template <WeightFormat F>
void embedding_gather_blocks(const int32_t* token_ids, int32_t num_tokens, const void* table, int64_t vocab,
                             int32_t hidden, float* out, cudaStream_t stream);

}  // namespace spark::cuda
