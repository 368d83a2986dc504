// nvfp4_weights.h — NVFP4 weights as NVIDIA ModelOpt checkpoints and llama.cpp's GGUF files
// hold them, and the checks of a ModelOpt checkpoint's tensors against its quantization map.
//
// A ModelOpt NVFP4 linear layer X keeps X.weight (U8 [rows, cols / 2]: E2M1 codes, value 2k
// in the low nibble of byte k), X.weight_scale (E4M3 [rows, cols / 16]: one scale per 16
// values), X.weight_scale_2 (F32, one per tensor) and, when its activations were quantized
// too (quant_algo NVFP4 rather than W4A16_NVFP4), X.input_scale. The value is
// e2m1 * weight_scale * weight_scale_2. Both backends run the weights with 16-bit or f32
// activations (weight-only, as the Spark playbooks run them), so input_scale is checked and
// not used. The codes and block scales are repacked, losslessly, into GGUF's NVFP4 blocks
// (quant.h's BlockNVFP4), weight_scale_2 becoming the Tensor's scale: one layout for both
// file formats. The repack happens where the blocks are read: a band of rows at a time on
// the way to the device (no host copy of the model beside the device's), all at once for
// the CPU backend.
#pragma once
#include <map>
#include <string>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/model/weights.h"

namespace spark {

// The tensors a ModelOpt checkpoint keeps beside its weights: weight_scale, weight_scale_2,
// input_scale, and the KV cache's k_scale / v_scale.
bool is_modelopt_side_name(const std::string& name);

// From the tensor table alone: every layer the quantization map names (quantized_layers of
// MIXED_PRECISION) has a weight of the dtype its algorithm stores. InputError naming the
// layer otherwise.
void check_modelopt_layers(const std::map<std::string, Tensor>& found, const ModelSpec& spec,
                           const std::string& source);
// At load, before any backend exists: every input and KV scale is one finite, positive
// F32 value (they are not used, but a zero or NaN one marks a broken export). InputError
// naming the tensor otherwise.
void check_modelopt_scales(const std::map<std::string, Tensor>& found, const std::string& source);

// The tensor table as the plans, `sparkd check` and check_tensor_set see it: each ModelOpt
// NVFP4 weight (U8 *.weight with a *.weight_scale beside it) as the NVFP4 tensor it
// becomes: its shape in values, its bytes GGUF's blocks (the codes' and block scales'
// bytes). Its data still points at the codes: only nvfp4_from_modelopt reads it.
// InputError naming the tensor when its rows are not whole 64-value blocks.
std::map<std::string, Tensor> nvfp4_header_view(const std::map<std::string, Tensor>& found,
                                                const std::string& source);

// The NVFP4 tensor of weight t (from nvfp4_header_view) and its scales in `found`, as the
// file holds them (Tensor::modelopt_block_scales), its scale weight_scale_2 (a copy `w`
// keeps). InputError naming the tensor when a scale is missing, of the wrong dtype or
// shape, NaN or negative: every block scale is read.
Tensor nvfp4_from_modelopt(const std::map<std::string, Tensor>& found, const Tensor& t, Weights& w,
                           const std::string& source);

// Rows [row0, row0 + n) of the NVFP4 tensor t as GGUF's blocks at dst: copied, or repacked
// from ModelOpt's layout.
void nvfp4_rows(const Tensor& t, int64_t row0, int64_t n, uint8_t* dst);

// Every NVFP4 tensor of `w` still in ModelOpt's layout repacked into a buffer `w` keeps (the
// tensor, at the same address, now views it), the file pages of its source dropped behind
// it: the CPU backend's load, which reads the blocks at every step.
void materialize_nvfp4(Weights& w);

// An NVFP4 tensor's E4M3 block scales (GGUF's): InputError naming the tensor and block
// when one is NaN. Reads 4 bytes a block.
void check_nvfp4_block_scales(const Tensor& t, const std::string& source);

// The value of a per-tensor scale (F32, shape [] or [1], or `count` values for a stack of
// experts): InputError naming it unless each is finite and positive.
const float* checked_tensor_scales(const Tensor& s, int64_t count, const std::string& source);

}  // namespace spark
