// stage_weights.cpp — binding a stage's tensors to the parts of its description.
#include "engine/model/stage_weights.h"

#include "engine/model/shape_text.h"
#include "engine/util/check.h"

namespace spark {

namespace {

const Tensor* need(const Weights& w, Part part, const std::vector<int64_t>& shape, int64_t layer, int64_t expert) {
  const std::string name = tensor_name(part, layer, expert);
  const Tensor& t = w.get(name);
  if (t.shape != shape)
    throw InputError("tensor " + name + " has shape " + shape_str(t.shape) + ", the model config implies " +
                     shape_str(shape));
  return &t;
}

}  // namespace

const Tensor& LayerWeights::get(Part p) const {
  const Tensor* t = find(p);
  SPARK_CHECK(t != nullptr, "a bound layer lacks a part its model has");
  return *t;
}

std::vector<const Tensor*>& LayerWeights::experts(Part p) {
  switch (p) {
    case Part::EXPERT_GATE: return expert_gate;
    case Part::EXPERT_UP: return expert_up;
    case Part::EXPERT_DOWN: return expert_down;
    case Part::EXPERT_GATE_BIAS: return expert_gate_bias;
    case Part::EXPERT_UP_BIAS: return expert_up_bias;
    case Part::EXPERT_DOWN_BIAS: return expert_down_bias;
    default: SPARK_CHECK(false, "not a per-expert part");
  }
}

StageWeights bind_stage(const ModelSpec& spec, const Weights& weights) {
  StageWeights stage;
  stage.range = weights.range();
  check_range(spec, stage.range);
  for (const PartSpec& p : outer_parts(spec, stage.range)) {
    const Tensor* t = need(weights, p.part, p.shape, -1, -1);
    if (p.part == Part::EMBEDDING) stage.embedding = t;
    else if (p.part == Part::FINAL_NORM) stage.final_norm = t;
    else if (p.part == Part::MTP_FC) stage.mtp_fc = t;
    else if (p.part == Part::MTP_EMBED_NORM) stage.mtp_embed_norm = t;
    else if (p.part == Part::MTP_HIDDEN_NORM) stage.mtp_hidden_norm = t;
    else if (p.part == Part::POS_EMBEDDING) stage.pos_embedding = t;
    else if (p.part == Part::TYPE_EMBEDDING) stage.type_embedding = t;
    else if (p.part == Part::EMBED_NORM) stage.embed_norm = t;
    else if (p.part == Part::EMBED_NORM_BIAS) stage.embed_norm_bias = t;
    else if (p.part == Part::ASSIST_IN) stage.assist_in = t;
    else if (p.part == Part::ASSIST_OUT) stage.assist_out = t;
    else if (p.part == Part::CENTROIDS) stage.centroids = t;
    else if (p.part == Part::TOKEN_ORDERING) stage.token_ordering = t;
    else stage.lm_head = t;
  }
  if (stage.final_norm && !stage.lm_head) stage.lm_head = stage.embedding;  // tied
  // A later stage of a tied model holds the embedding only as its head.
  if (!stage.has_embedding()) stage.embedding = nullptr;
  for (int64_t l = stage.range.first_layer; l < stage.range.last_layer; ++l) {
    LayerWeights layer;
    for (const PartSpec& p : layer_parts(spec, l)) {
      if (!part_is_per_expert(p.part)) {
        layer.parts[static_cast<size_t>(p.part)] = need(weights, p.part, p.shape, l, -1);
        continue;
      }
      auto& list = layer.experts(p.part);
      for (int64_t e = 0; e < p.copies; ++e) list.push_back(need(weights, p.part, p.shape, l, e));
    }
    stage.layers.push_back(std::move(layer));
  }
  return stage;
}

std::vector<const Tensor*> all_tensors(const StageWeights& stage) {
  std::vector<const Tensor*> out;
  auto add = [&](const Tensor* t) {
    if (t) out.push_back(t);
  };
  add(stage.embedding);
  add(stage.mtp_fc);
  add(stage.mtp_embed_norm);
  add(stage.mtp_hidden_norm);
  for (const Tensor* t : {stage.pos_embedding, stage.type_embedding, stage.embed_norm, stage.embed_norm_bias,
                          stage.assist_in, stage.assist_out, stage.centroids})
    add(t);
  for (const LayerWeights& l : stage.layers) {
    for (const Tensor* t : l.parts) add(t);
    for (const auto* list : {&l.expert_gate, &l.expert_up, &l.expert_down, &l.expert_gate_bias, &l.expert_up_bias,
                             &l.expert_down_bias})
      for (const Tensor* t : *list) add(t);
  }
  add(stage.final_norm);
  if (stage.lm_head != stage.embedding) add(stage.lm_head);
  return out;
}

std::vector<int32_t> read_token_ordering(const Tensor& t, int64_t vocab) {
  SPARK_CHECK(t.numel() == vocab, "TOKEN_ORDERING is bound with the vocabulary's shape");
  if (t.dtype != DType::I64)
    throw InputError("tensor " + t.name + " has dtype " + std::string(dtype_name(t.dtype)) + ", not I64 (token ids)");
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::vector<uint8_t> seen(static_cast<size_t>(vocab), 0);
  const auto* ids = static_cast<const int64_t*>(t.data);
  for (int64_t i = 0; i < vocab; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab || seen[size_t(ids[i])]++)
      throw InputError("tensor " + t.name + " must list every token id below " + std::to_string(vocab) +
                       " once; entry " + std::to_string(i) + " is " + std::to_string(ids[i]));
    order[size_t(i)] = static_cast<int32_t>(ids[i]);
  }
  return order;
}

}  // namespace spark
