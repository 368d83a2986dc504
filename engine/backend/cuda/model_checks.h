// model_checks.h — which models and stages the CUDA backend takes: the layer cases it
// implements (layer_shape.h) and the sizes its kernels accept, checked before anything is
// allocated, each refusal an InputError naming the config field or the missing case.
#pragma once
#include <vector>

#include "engine/model/layer_shape.h"
#include "engine/model/model_spec.h"

namespace spark::cuda {

// The layers of `range` (layer_shapes) once the CUDA backend is known to run them all.
std::vector<LayerShape> checked_layer_shapes(const ModelSpec& spec, LayerRange range);

}  // namespace spark::cuda
