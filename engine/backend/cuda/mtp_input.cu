// mtp_input.cu — an MTP head's input stage (mtp_input.h): the two pre-fc RMSNorms into the
// halves of one [rows, 2H] buffer, then the fc GEMM into the residual stream.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/mtp_input.h"
#include "engine/backend/cuda/rms_norm.h"

namespace spark::cuda {

void mtp_input(Gemm& gemm, HalfType type, const MtpInput& w, const float* hidden_in, int32_t hidden_rows, int32_t rows,
               float* x, float* scratch, void* pair, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(w.fc && w.embed_norm && w.hidden_norm, "mtp_input: the head's fc or norms are not on the device");
  SPARK_CHECK(rows >= 0 && hidden_rows >= 0 && hidden_rows <= rows && (hidden_in || hidden_rows == 0),
              "mtp_input: bad hidden rows");
  if (rows == 0) return;
  const int32_t H = w.hidden;
  const size_t row_bytes = size_t(H) * 4;
  if (hidden_rows > 0)
    CUDA_CHECK(cudaMemcpyAsync(scratch, hidden_in, size_t(hidden_rows) * row_bytes, cudaMemcpyHostToDevice, stream));
  // A padded batch's padding rows come with no hidden state: zeros, which norm to zeros.
  if (rows > hidden_rows)
    CUDA_CHECK(cudaMemsetAsync(scratch + size_t(hidden_rows) * size_t(H), 0, size_t(rows - hidden_rows) * row_bytes,
                               stream));
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    T* halves = static_cast<T*>(pair);
    rms_norm_strided<T>(x, rows, w.embed_norm, H, w.eps, halves, 2 * int64_t(H), stream);
    rms_norm_strided<T>(scratch, rows, w.hidden_norm, H, w.eps, halves + H, 2 * int64_t(H), stream);
  });
  gemm.linear(type, pair, rows, 2 * H, *w.fc, H, x, GemmOut::F32, stream, GemmPath::AUTO, programmatic);
}

}  // namespace spark::cuda
