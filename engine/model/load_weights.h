// load_weights.h — filling a Weights registry from safetensors, GGUF or dummy data.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/model_spec.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace spark {

// Compares the tensors a checkpoint holds (Hugging Face names) with what the
// architecture has: throws InputError listing missing tensors (of `range`), unexpected
// tensors (not part of the model at all) and wrong shapes. Returns what `range` needs.
std::vector<TensorSpec> check_tensor_set(const std::map<std::string, Tensor>& found, const ModelSpec& spec,
                                         LayerRange range, const std::string& source);

// Views of the tensors `range` needs, straight into the mapped files (no copy).
// Weight dtypes must be F32, F16 or BF16.
Weights load_safetensors_weights(const SafetensorsModel& model, const ModelSpec& spec, LayerRange range,
                                 const std::string& source);

// The GGUF tensors of `range` under their Hugging Face names; stacked expert tensors
// become per-expert views. Llama-architecture Q and K projections are copied with
// their rows put back in Hugging Face order (see gguf_unpermute_rows); everything else
// is a view into the mapping.
Weights load_gguf_weights(const GgufFile& file, const ModelSpec& spec, LayerRange range);
// Every tensor of the file under its Hugging Face name, shapes only, data pointing into
// the file as stored (experts split, no unpermuting): what check_tensor_set compares.
// Tensors the architecture converts (Architecture::convert_gguf) get their bytes, for the
// layers of `range`, only with `keep`, which holds them.
std::map<std::string, Tensor> gguf_hf_tensors(const GgufFile& file, const ModelSpec& spec, LayerRange range = {},
                                              Weights* keep = nullptr);

// llama.cpp's converter stores the Q/K rows of each head of a llama-architecture model
// interleaved (row 2i = HF row i, row 2i+1 = HF row i + head_dim/2) so that its RoPE can
// rotate adjacent pairs. Copies `rows` rows of `row_bytes` bytes from `src` to `dst`
// back in Hugging Face order (first half, then second half of each head), which is what
// rotate_half RoPE expects.
void gguf_unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int64_t head_dim);

}  // namespace spark
