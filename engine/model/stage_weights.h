// stage_weights.h — a stage's tensors bound once to their parts: the typed table both
// backends read, so that no backend looks a tensor up by name.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

struct LayerWeights {
  std::array<const Tensor*, kNumParts> parts{};  // null where the layer has no such part
  // Per-expert parts, [num_experts] each, in an MoE layer; empty otherwise (the biases
  // also in an MoE layer without expert biases).
  std::vector<const Tensor*> expert_gate, expert_up, expert_down;
  std::vector<const Tensor*> expert_gate_bias, expert_up_bias, expert_down_bias;

  const Tensor* find(Part p) const { return parts[static_cast<size_t>(p)]; }
  const Tensor& get(Part p) const;  // SPARK_CHECKs presence: for parts the layer must have
  std::vector<const Tensor*>& experts(Part p);  // the list of a per-expert part
  bool is_moe() const { return find(Part::ROUTER) != nullptr; }
};

struct StageWeights {
  LayerRange range;
  const Tensor* embedding = nullptr;   // when the stage starts at layer 0
  const Tensor* final_norm = nullptr;  // when the stage ends at the last layer
  const Tensor* lm_head = nullptr;     // likewise; the embedding tensor itself when tied
  // An MTP head's input (ModelSpec::mtp_head): fc [H, 2H] over [norm(embedding); norm(hidden)].
  const Tensor* mtp_fc = nullptr;
  const Tensor* mtp_embed_norm = nullptr;
  const Tensor* mtp_hidden_norm = nullptr;
  // An encoder's input (ModelSpec::encoder): learned positions, token types (null when the
  // model has none) and the LayerNorm after their sum.
  const Tensor* pos_embedding = nullptr;
  const Tensor* type_embedding = nullptr;
  const Tensor* embed_norm = nullptr;
  const Tensor* embed_norm_bias = nullptr;
  // Gemma 4's assistant (ModelSpec::assistant_of_hidden): ASSIST_IN, ASSIST_OUT and, with
  // clustered logits, CENTROIDS and TOKEN_ORDERING (I64; not a weight: all_tensors leaves it out).
  const Tensor* assist_in = nullptr;
  const Tensor* assist_out = nullptr;
  const Tensor* centroids = nullptr;
  const Tensor* token_ordering = nullptr;
  std::vector<LayerWeights> layers;    // [range.last_layer - range.first_layer]

  bool has_embedding() const { return range.first_layer == 0; }
  bool has_head() const { return lm_head != nullptr; }
};

// The dtype a file stores a part in (layer -1 for the parts outside the layers): what a
// backend's memory plan needs to know of the tensors before they are loaded.
using StoredDType = std::function<DType(Part part, int64_t layer)>;

// Binds every part the description (arch.h) lists for weights.range(). Throws InputError
// naming a missing tensor or one whose shape disagrees with `spec`. The table points
// into `weights`, which must outlive it.
StageWeights bind_stage(const ModelSpec& spec, const Weights& weights);

// Every tensor the table holds, each once (a tied head is the embedding), for checks a
// backend makes of all of them (dtypes it can read).
std::vector<const Tensor*> all_tensors(const StageWeights& stage);

// TOKEN_ORDERING's token ids (I64), each below `vocab` and each once; InputError otherwise.
std::vector<int32_t> read_token_ordering(const Tensor& t, int64_t vocab);

}  // namespace spark
