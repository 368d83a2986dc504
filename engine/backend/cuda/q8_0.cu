// q8_0.cu — the Q8_0 linear layer (q8_0.h): its GEMV, block_gemv.cuh's shared kernel over
// weight_readers.cuh's Q8_0Rows, streams the packed weights once and dequantizes in
// registers (many rows go through packed_gemm.h); and the upload.
//
// Bytes first. A Q8_0 row of k weights is k quant bytes plus k/32 two-byte scales:
// 1.0625 bytes a weight, against 2 for BF16, so a decode step that reads each weight
// once moves 47% fewer bytes. Llama-3.1-8B at batch 1 reads ~7.5e9 weights: 8.0 GB, so
// GB10 (~218 GB/s measured copy) tops out near 27 tokens/s and H100 (~3.0 TB/s) near 370.
//
// Instructions. Per weight: one int8 -> f32 convert and a scale multiply; per weight and
// activation row: one 16-bit -> f32 convert of x and one FMA. At r rows that
// is about 1 + 2r lane operations a weight. GB10 streams 218e9 / 1.0625 ≈ 205e9 weights/s
// and issues 48 SMs x 128 lanes x ~2.4 GHz ≈ 15e12 lane operations/s: 8 rows need
// 205e9 x 17 ≈ 3.5e12, a quarter of that, so GB10 stays bandwidth-bound at every row
// count this kernel takes. H100 streams ~2.8e12 weights/s against ~30e12 lane
// operations/s (132 x 128 x 1.75 GHz): bandwidth-bound up to about 4 rows, issue-bound
// beyond (8 rows: ~48e12 needed, ~1.6x the time of the weight stream). Quantizing x to
// int8 once per layer and using dp4a (4 multiply-adds an instruction) is the next step
// for H100 at 5..8 rows; GB10, the product target, does not need it.
//
// Layout (block_gemv.cuh's gemv_rows_kernel over weight_readers.cuh's Q8_0Rows): one warp
// per weight row. Each lane loads 16 quant bytes (half a block) with one 16-byte
// non-allocating load, so a warp step covers 512 contiguous bytes of the row
// (fully coalesced), the half-block's scale (two lanes share one 2-byte load, served by
// L1), and the matching 16 activation values of each row (two 16-byte loads, L1/L2
// resident: x is at most 8 x k x 2 bytes). The next step's weights are requested before
// the current step is multiplied, so each warp keeps 512 bytes of weights in flight;
// Little's law asks ~18 KB in flight per SM on H100 (3.0 TB/s x ~0.8 us / 132 SMs) and
// ~3 KB on GB10 (218 GB/s x ~0.6 us / 48 SMs): 36 resident warps cover H100, 6 cover GB10.
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/block_gemv.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/q8_0.h"

#include <cstddef>

#include "engine/model/quant.h"

namespace spark::cuda {
namespace {

constexpr int kBlockValues = 32;  // a Q8_0 block

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

void check_matrix(const DeviceMatrix& w, int32_t k, const char* who) {
  SPARK_CHECK(w.format == WeightFormat::Q8_0 && w.data && w.scales, std::string(who) + ": not a Q8_0 matrix");
  SPARK_CHECK(k > 0 && k % kBlockValues == 0, std::string(who) + ": k must be a positive multiple of 32, got " +
                                                  std::to_string(k));
  SPARK_CHECK(aligned16(w.data), std::string(who) + ": quants must be 16-byte aligned");
}

}  // namespace

void gemv_q8_0(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
               int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  check_matrix(w, k, "gemv_q8_0");
  launch_gemv_rows("gemv_q8_0", Q8_0Rows{static_cast<const int8_t*>(w.data), static_cast<const f16*>(w.scales), k},
                   type, x, rows, k, n, y, ldy, out, stream, programmatic);
}

void upload_q8_0(const Tensor& t, void* qs, void* scales) {
  SPARK_CHECK(t.dtype == DType::Q8_0 && t.cols() % kBlockValues == 0, "upload_q8_0: " + t.name + " is not Q8_0 rows");
  static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == sizeof(uint16_t), "d, then 32 quants");
  upload_split_blocks(t.data, t.rows() * (t.cols() / kBlockValues), sizeof(BlockQ8_0), sizeof(uint16_t), qs, scales);
}

}  // namespace spark::cuda
