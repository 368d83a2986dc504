// arch.h — the tensors each supported architecture has, by Hugging Face name and shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // outermost first, as in the checkpoint
};

// What a stage holding `range` needs: the layers' tensors, plus model.embed_tokens when
// the stage starts at layer 0, plus model.norm and the LM head when it ends at the last
// layer (the LM head is model.embed_tokens itself when the embeddings are tied).
std::vector<TensorSpec> expected_tensors(const ModelSpec& spec, LayerRange range);
LayerRange full_range(const ModelSpec& spec);
// Throws InputError unless 0 <= first < last <= num_layers.
void check_range(const ModelSpec& spec, LayerRange range);

// Parameters of the whole model (tied embeddings counted once), and of what a stage
// holding `range` keeps; both in closed form, without listing tensors.
int64_t parameter_count(const ModelSpec& spec);
int64_t parameter_count(const ModelSpec& spec, LayerRange range);
// expected_tensors(spec, range).size() in closed form: lets a loader refuse a file that
// cannot match before listing millions of names a hostile config asks for.
int64_t expected_tensor_count(const ModelSpec& spec, LayerRange range);

}  // namespace spark
