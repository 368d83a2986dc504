// load_quantization.h — [model] quantize: a checkpoint's 16-bit (and f32) weight matrices
// quantized to Q8_0 or FP8 as they load, so that a token reads the bytes a quantized file
// would hold. One rule says which tensors change and into what: the memory plans, `sparkd
// check` and both backends ask served_dtype. The CPU backend's tensors are quantized here
// (quantize_weights); the CUDA backend's on their way to the device, a chunk of rows at a
// time (device_weights.cu), so that no load holds a second copy of the model.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/model/arch.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"
#include "engine/model/tensor.h"
#include "engine/model/weights.h"

namespace spark {

struct WeightQuantization {
  DType to = DType::COUNT;              // Q8_0 or F8_E4M3; COUNT: none
  std::array<bool, kNumParts> parts{};  // the parts it applies to (quantize_keep unset)

  bool active() const { return to != DType::COUNT; }
};

// From [model] quantize and quantize_keep (validated by the config).
WeightQuantization weight_quantization(const ModelConfig& model);
// "q8_0 (attention, mlp, experts, lm_head, embedding)": the type and the parts it applies to.
std::string describe_quantization(const WeightQuantization& q);

// The dtype a weight of `part` stored as `stored`, in rows of `cols` values, is served in:
// the quantization's type for F32, F16 and BF16 matrices of the parts it applies to, else
// `stored`. Already-quantized tensors, vectors, routers and the shared expert's one-row
// gate stay as stored; Q8_0 needs rows of whole 32-value blocks. FP8 leaves the embedding
// table (and a head tied to it) alone, as FP8 checkpoints do: it is gathered a row at a
// time, which no FP8 reader does. A tied head is the embedding table: quantized when either
// part is chosen.
DType served_dtype(const WeightQuantization& q, const ModelSpec& spec, Part part, DType stored, int64_t cols);

// `stored` as served: what the plans and the CUDA layout count.
StoredDType served_dtypes(StoredDType stored, const WeightQuantization& q, const ModelSpec& spec);

// The scale blocks of a matrix quantized to FP8 at load: the spec's (an FP8 checkpoint's
// 16-bit tensors take its blocks), else one scale a row (per channel).
int64_t fp8_load_block_rows(const ModelSpec& spec);
int64_t fp8_load_block_cols(const ModelSpec& spec, int64_t cols);

// Rows [row0, row0 + n) of t (F32, F16 or BF16) quantized to `to`: Q8_0 blocks at dst, or
// e4m3 bytes at dst and the band's f32 scales at scales (fp8_load_block_*; row0 and n whole
// bands but at the end of the tensor).
void quantize_rows(const Tensor& t, const ModelSpec& spec, int64_t row0, int64_t n, DType to, void* dst, float* scales);

// Every tensor of `w` that `q` changes, quantized into a buffer `w` keeps (the tensor, at
// the same address, now views it), the file pages of its source dropped behind it. The
// CPU backend's load.
void quantize_weights(Weights& w, const ModelSpec& spec, const WeightQuantization& q);

}  // namespace spark
