// stage_loader.cpp — inspect -> layer range -> memory plan -> weights -> backend.
#include "engine/backend/stage_loader.h"

#include <cstdint>
#include <cstdlib>

#include "engine/backend/backend_factory.h"
#include "engine/model/arch.h"
#include "engine/model/nvfp4_weights.h"
#include "engine/util/check.h"

namespace spark {

int64_t resolve_layer_split(const Config& config, const ModelInfo& info) {
  const ModelSpec& s = info.spec;
  const std::string& text = config.peer.layer_split;
  int64_t split = 0;
  if (text == "auto") {
    if (s.num_layers < 2) throw InputError("a model of " + std::to_string(s.num_layers) + " layer cannot be split over two boxes");
    // Balance the work per token. A GPU streams the weights, so its step time follows
    // their bytes; the CPU backend decodes every weight to f32, so its time follows their
    // number. Either way the head's embedding is a gather (nearly free) while the
    // worker's LM head is a full matmul.
    const bool by_count = resolve_backend(config) == "cpu";
    auto work = [&](LayerRange r) {
      return by_count ? parameter_count(s, r) : int64_t(stage_weight_bytes(info, r));
    };
    const auto it = info.tensors.find(tensor_name(Part::EMBEDDING));
    const int64_t embedding = by_count ? s.vocab_size * s.hidden_size
                              : it != info.tensors.end() ? int64_t(it->second.nbytes)
                                                         : s.vocab_size * s.hidden_size * dtype_block_bytes(info.weight_dtype);
    int64_t best_gap = INT64_MAX;
    for (int64_t k = 1; k < s.num_layers; ++k) {
      const int64_t head = work({0, k}) - embedding;
      const int64_t worker = work({k, s.num_layers});
      if (std::llabs(head - worker) < best_gap) {
        best_gap = std::llabs(head - worker);
        split = k;
      }
    }
    return split;
  }
  try {
    size_t used = 0;
    split = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw InputError("peer.layer_split = \"" + text + "\" is neither \"auto\" nor a layer number");
  }
  if (split < 1 || split >= s.num_layers)
    throw InputError("peer.layer_split = " + std::to_string(split) + " must be between 1 and " +
                     std::to_string(s.num_layers - 1) + " for a model of " + std::to_string(s.num_layers) + " layers");
  return split;
}

LayerRange stage_range(const Config& config, const ModelInfo& info) {
  if (!config.peer.enabled) return full_range(info.spec);
  const int64_t split = resolve_layer_split(config, info);
  return config.peer.role == "worker" ? LayerRange{split, info.spec.num_layers} : LayerRange{0, split};
}

Config draft_model_config(const Config& config) {
  Config c = config;
  c.model = ModelConfig{};
  c.model.path = config.engine.speculative_model;
  c.model.max_model_len = config.model.max_model_len;
  c.model.quantize = config.model.quantize;  // a draft's 16-bit weights are quantized as the model's
  c.model.quantize_keep = config.model.quantize_keep;
  return c;
}

namespace {

// The draft must cover the model's context, and propose ids the model has.
void check_draft_model(const ModelSpec& model, int64_t max_model_len, const ModelSpec& draft, const std::string& path) {
  const std::string what = "engine.speculative_model (" + path + ", " + draft.architecture + ")";
  if (draft.vocab_size > model.vocab_size)
    throw InputError(what + " has " + std::to_string(draft.vocab_size) + " token ids, the model " +
                     std::to_string(model.vocab_size) + ": a draft model shares the model's tokenizer");
  if (draft.max_position_embeddings > 0 && draft.max_position_embeddings < max_model_len)
    throw InputError(what + " has " + std::to_string(draft.max_position_embeddings) +
                     " positions, fewer than the model's context of " + std::to_string(max_model_len) +
                     ": lower model.max_model_len or pick another draft");
}

}  // namespace

StagePlan plan_stage(const Config& config) {
  StagePlan p;
  p.info = inspect_model(config);
  p.range = stage_range(config, p.info);
  p.backend = resolve_backend(config);
  StageFootprint footprint = stage_footprint(config, p.info, p.range, p.backend);
  const bool engine_box = !(config.peer.enabled && config.peer.role == "worker");
  if (config.engine.drafts_from_model() && engine_box) {
    const bool mtp = config.engine.speculative == "mtp";
    const Config dc = mtp ? config : draft_model_config(config);
    // The draft's errors name it: "model path ... does not exist" alone points at model.path.
    try {
      p.draft = mtp ? mtp_head_info(p.info) : inspect_model(dc);
    } catch (const InputError& e) {
      throw InputError(std::string(mtp ? "engine.speculative = \"mtp\": " : "engine.speculative_model: ") + e.what());
    }
    if (!mtp) check_draft_model(p.info.spec, effective_max_model_len(config, p.info.spec), p.draft->spec, dc.model.path);
    // Gemma 4's assistant reads the model's embedding and last layers' K and V where they are.
    if (p.draft->spec.is_assistant()) {
      const std::string what = "engine.speculative_model (" + dc.model.path + ")";
      try {
        assistant_model_layers(p.info.spec, p.draft->spec);
      } catch (const InputError& e) {
        throw InputError(what + ": " + e.what());
      }
      if (config.peer.enabled)
        throw InputError(what + " is Gemma 4's assistant, which reads the model's last layers: it runs without [peer]");
    }
    add_draft_footprint(config, *p.draft, p.backend, footprint);
  }
  p.memory = plan_memory(p.info.spec, p.range, footprint, config, memory_budget(p.backend));
  return p;
}

void add_draft_footprint(const Config& config, const ModelInfo& draft, const std::string& backend,
                         StageFootprint& footprint) {
  const Config dc = config.engine.speculative == "mtp" ? config : draft_model_config(config);
  const StageFootprint d = stage_footprint(dc, draft, full_range(draft.spec), backend);
  footprint.draft_weight_bytes = d.weight_bytes;
  footprint.draft_kv_bytes_per_token = d.kv_bytes_per_token;
  // With recurrent layers, each running sequence's state and its snapshot
  // (engine/core/draft_model.h).
  footprint.draft_workspace_bytes =
      d.workspace_bytes + d.reserve_bytes + 2 * uint64_t(config.engine.max_num_seqs) * d.state_bytes_per_sequence;
}

std::unique_ptr<LoadedStage> load_stage(const Config& config) { return load_stage(config, plan_stage(config)); }

std::unique_ptr<LoadedStage> load_stage(const Config& config, StagePlan plan) {
  require_fits(plan.memory);
  auto s = std::make_unique<LoadedStage>();
  s->plan = std::move(plan);
  const ModelSpec& spec = s->plan.info.spec;
  s->weights = load_stage_weights(s->plan.info, s->plan.range);
  // The CUDA backend quantizes, and repacks ModelOpt's NVFP4, on its way to the device
  // (device_weights.cu).
  const bool cpu = s->plan.backend == "cpu";
  if (cpu) {
    quantize_weights(s->weights, spec, s->plan.info.quantize);
    materialize_nvfp4(s->weights);
  }
  s->stage = bind_stage(spec, s->weights);
  s->backend = make_backend(config, spec, s->stage);
  if (s->plan.draft) {
    const ModelInfo& draft = *s->plan.draft;
    s->draft_weights = load_stage_weights(draft, full_range(draft.spec));
    if (cpu) {
      quantize_weights(s->draft_weights, draft.spec, draft.quantize);
      materialize_nvfp4(s->draft_weights);
    }
    s->draft_stage = bind_stage(draft.spec, s->draft_weights);
    s->draft_backend = make_backend(draft.spec.mtp_head ? config : draft_model_config(config), draft.spec, s->draft_stage);
    if (draft.spec.is_assistant()) s->draft_backend->attach_model(*s->backend);
  }
  return s;
}

}  // namespace spark
