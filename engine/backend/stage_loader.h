// stage_loader.h — the one loading sequence every command runs: inspect the model files,
// choose this box's layers, plan memory with the chosen backend's footprint (refusing a
// plan that does not fit, before anything is allocated), load the layers' weights, bind
// them, build the backend.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/model/memory_plan.h"
#include "engine/model/model_loader.h"
#include "engine/model/stage_weights.h"

namespace spark {

// The first layer of the worker: peer.layer_split, or with "auto" the split that gives
// both boxes about the same work per token (weight bytes read per step on a GPU, weights
// decoded per step on the CPU). Throws InputError for a split outside [1, num_layers - 1]
// or text that is not a number.
int64_t resolve_layer_split(const Config& config, const ModelInfo& info);

// This box's layers: all of them, or its half of the pair.
LayerRange stage_range(const Config& config, const ModelInfo& info);

// speculative = "draft": the config the draft model loads with (its path as model.path,
// the model's max_model_len, the engine settings shared).
Config draft_model_config(const Config& config);

// Everything known before a weight byte is read.
struct StagePlan {
  ModelInfo info;
  LayerRange range;
  std::string backend;  // resolve_backend(config)
  MemoryPlan memory;    // with the draft model's part, when there is one
  // speculative = "draft" (the draft model) or "mtp" (the model's MTP head, read from its
  // files: mtp_head_info) on the box that runs the engine (not a pipeline's worker).
  std::optional<ModelInfo> draft;
};
// inspect -> range -> plan. Does not require that the plan fits (`sparkd check` prints
// one that does not); load_stage does.
StagePlan plan_stage(const Config& config);
// The draft model's (or MTP head's) part of a box's footprint on `backend`: its weights,
// K and V a token, workspace and recurrent states.
void add_draft_footprint(const Config& config, const ModelInfo& draft, const std::string& backend,
                         StageFootprint& footprint);

struct LoadedStage {
  StagePlan plan;
  Weights weights;             // the storage the bound tensors point into
  StageWeights stage;          // bound once; the backend reads these
  std::unique_ptr<Backend> backend;
  // The draft model's, when the plan has one (on the same backend).
  Weights draft_weights;
  StageWeights draft_stage;
  std::unique_ptr<Backend> draft_backend;
};
// plan_stage, require_fits, load the range's weights, bind them and build the backend.
std::unique_ptr<LoadedStage> load_stage(const Config& config);
// The same from a plan already made (of `config` before a command narrowed it).
std::unique_ptr<LoadedStage> load_stage(const Config& config, StagePlan plan);

}  // namespace spark
