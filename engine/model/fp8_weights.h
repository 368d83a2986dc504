// fp8_weights.h — the scales of an FP8 checkpoint (quantization_config quant_method
// "fp8"): each e4m3 weight `X.weight` comes with `X.weight_scale_inv` (block scales, the
// grid of weight_block_size blocks) or `X.weight_scale` (one scale, or one per output
// channel). Checked and attached to the weight's Tensor (tensor.h) as f32.
#pragma once
#include <map>
#include <string>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/model/weights.h"

namespace spark {

// True for the scale tensors an FP8 checkpoint carries beside its weights.
bool is_fp8_scale_name(const std::string& name);

// Finds the scale tensor of the F8_E4M3 weight `t` in `found`, checks its dtype (F32, BF16
// or F16), shape (the block grid, [1] / [] per tensor, [rows] / [rows, 1] per channel)
// and values (finite, positive), converts it to f32 kept alive by `w` and sets t.scale
// and its block sizes. InputError naming the tensor otherwise.
void attach_fp8_scales(const std::map<std::string, Tensor>& found, const ModelSpec& spec, Tensor& t, Weights& w,
                       const std::string& source);

// The f32 value of an e4m3 byte (exact; 0x7F / 0xFF are NaN, there are no infinities).
float fp8_e4m3_to_f32(uint8_t v);

}  // namespace spark
