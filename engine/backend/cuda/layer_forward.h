// layer_forward.h — the decoder layers of one step on the device, between the embedding
// (or the previous stage's hidden states) and the final norm: each layer's token mixer
// (attention, Gated DeltaNet, Mamba-2) and feed-forward (SwiGLU or squared-ReLU MLP, MoE
// with its shared expert and LatentMoE projections) around the f32 residual stream; and
// encoders' post-norm layers (bidirectional attention, biased GELU MLP, LayerNorms). The
// batch plumbing, graphs and memory live in cuda_backend.cu; this is the model's math.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/backend/cuda/attention.h"
#include "engine/backend/cuda/device_weights.h"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/moe.h"
#include "engine/backend/cuda/rope_kv.h"
#include "engine/backend/cuda/step_buffers.h"
#include "engine/model/layer_shape.h"
#include "engine/model/model_spec.h"

namespace spark::cuda {

// What the layers of a stage run with: the backend's weights, buffers and kernels for the
// whole of its life, and the per-sequence recurrent states.
struct LayerStep {
  const ModelSpec& spec;
  const std::vector<LayerShape>& shapes;  // the stage's layers (layer_shape.h)
  const DeviceWeights& weights;
  const Activations& act;
  Gemm& gemm;
  const std::vector<Attention*>& attention;  // each of the stage's layers' (its geometry's); null without attention
  const MoeScratch* moe;  // null without MoE layers
  const std::vector<RopeArgs>& ropes;  // each of the stage's layers' (its layer type's base and scaling)
  const KvShape& kv;
  const std::vector<KvLayer>& cache;
  // Each slot holds every recurrent layer's state in layer order (recurrent_index: a
  // layer's place among them, or -1), spec.recurrent_state_values() floats each.
  float* states;
  int64_t state_slot_values;  // floats from one slot to the next
  const std::vector<int64_t>& recurrent_index;
  HalfType half;
};

// Runs the stage's layers over db's rows: x (act.x) is the residual stream on entry and on
// return; every other activation buffer is scratch, but that an encoder's (post-norm)
// layers also read x rounded to T in act.normed on entry, and leave it there. T is the compute type (__nv_bfloat16
// or __half). No host synchronisation: a decode step captures into a CUDA graph.
template <typename T>
void run_layers(const LayerStep& s, const DeviceBatch& db, cudaStream_t stream, bool programmatic);

}  // namespace spark::cuda
