// arch.h — the one description of each supported architecture's tensors: which parts a
// layer range holds, their shapes, and what Hugging Face and GGUF files call them. The
// loaders check files against it, the dummy loader fills it, bind_stage (stage_weights.h)
// turns it into the typed table the backends read; nothing else spells a tensor name.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// The parts of a decoder-only model, whatever a file calls them.
enum class Part : uint8_t {
  EMBEDDING, FINAL_NORM, LM_HEAD,  // outside the layers
  // An MTP head's input (ModelSpec::mtp_head): the fc over the normed embedding and hidden state.
  MTP_FC, MTP_EMBED_NORM, MTP_HIDDEN_NORM,
  // An encoder's input (ModelSpec::encoder): learned positions, token types, the LayerNorm after them.
  POS_EMBEDDING, TYPE_EMBEDDING, EMBED_NORM, EMBED_NORM_BIAS,
  // Gemma 4's assistant (ModelSpec::assistant_of_hidden): into its width from [embedding;
  // hidden], back out to the model's, and its clustered vocabulary (I64 token ids).
  ASSIST_IN, ASSIST_OUT, CENTROIDS, TOKEN_ORDERING,
  ATTN_NORM, Q, K, V, O, Q_BIAS, K_BIAS, V_BIAS, Q_NORM, K_NORM,
  FFN_NORM, GATE, UP, DOWN,                    // dense MLP
  ROUTER, EXPERT_GATE, EXPERT_UP, EXPERT_DOWN,  // mixture of experts; EXPERT_* once per expert
  O_BIAS, SINKS,                                // gpt-oss attention: output bias, per-head sink logits
  ROUTER_BIAS, EXPERT_GATE_BIAS, EXPERT_UP_BIAS, EXPERT_DOWN_BIAS,  // gpt-oss experts
  // Gated DeltaNet (Qwen3.5/3.6 linear attention): the q/k/v, z, b and a projections, the
  // depthwise conv1d, the decay's A_log and dt_bias, the gated norm, the output.
  LIN_QKV, LIN_Z, LIN_B, LIN_A, LIN_CONV, LIN_A_LOG, LIN_DT_BIAS, LIN_NORM, LIN_OUT,
  SHARED_GATE, SHARED_UP, SHARED_DOWN, SHARED_EXPERT_GATE,  // the shared expert and its gate
  ROUTER_SCORE_BIAS,  // Nemotron-H: added to the router's sigmoid scores to choose experts
  // Nemotron-3-Super's LatentMoE: into the experts' latent space and back out of it.
  MOE_LATENT_IN, MOE_LATENT_OUT,
  // Mamba-2 (Nemotron-H): in_proj, the conv1d and its bias, A_log, D, dt_bias, the grouped
  // gated norm, out_proj.
  SSM_IN, SSM_CONV, SSM_CONV_BIAS, SSM_A_LOG, SSM_D, SSM_DT_BIAS, SSM_NORM, SSM_OUT,
  // An encoder layer's LayerNorm biases and MLP biases.
  ATTN_NORM_BIAS, FFN_NORM_BIAS, UP_BIAS, DOWN_BIAS,
  // Gemma's sandwich norms (ModelSpec::sandwich_norms): on the attention's output and on the
  // MLP's, before each joins the residual. FFN_NORM is the norm before the MLP, whatever a
  // checkpoint calls it (Gemma: pre_feedforward_layernorm; its post_attention_layernorm is
  // POST_ATTN_NORM here).
  POST_ATTN_NORM, POST_FFN_NORM,
  // Gemma 4 (ModelSpec::layer_scalar, moe_beside_mlp): the layer's output scalar; the MoE
  // block's norms (the experts' input, the dense MLP's output, the experts' output); the
  // router's input scale and its per-expert scales.
  LAYER_SCALAR, MOE_NORM, POST_MLP_NORM, POST_MOE_NORM, ROUTER_INPUT_SCALE, EXPERT_SCALE,
  COUNT
};
inline constexpr size_t kNumParts = static_cast<size_t>(Part::COUNT);
// Norm weights, and the scales Gemma 4 multiplies by (initialised to 1 by dummy weights).
bool part_is_norm(Part p);
// The families of weight matrices a user names ([model] quantize_keep): "attention" (the
// token mixer's projections, attention's and the recurrent mixers'), "mlp", "experts" (the
// shared expert's too), "lm_head", "embedding".
struct PartFamily {
  const char* name;
  std::vector<Part> parts;
};
const std::vector<PartFamily>& part_families();
bool part_is_per_expert(Part p);  // EXPERT_GATE, EXPERT_UP, EXPERT_DOWN and their biases

struct TensorSpec {
  std::string name;            // the Hugging Face name
  std::vector<int64_t> shape;  // outermost first, as in the checkpoint
  Part part = Part::EMBEDDING;
  int64_t layer = -1;   // -1 outside the layers
  int64_t expert = -1;  // -1 unless per expert
};

// One part of one layer (or of the model around the layers): its shape, and how many
// tensors of that shape it is (num_experts for a per-expert part, else 1).
struct PartSpec {
  Part part;
  std::vector<int64_t> shape;
  int64_t copies = 1;
};
// The parts layer `layer` has: attention (with bias and q/k norm as the spec says) or,
// for a recurrent layer, the Gated DeltaNet, then a dense MLP or, for an MoE layer
// (ModelSpec::layer_is_moe), the router, the experts and the shared expert.
std::vector<PartSpec> layer_parts(const ModelSpec& spec, int64_t layer);
// The parts outside the layers a stage holding `range` keeps: the embedding when it
// starts at layer 0, the final norm and the LM head when it ends at the last layer (a
// tied LM head is the embedding itself, kept once).
std::vector<PartSpec> outer_parts(const ModelSpec& spec, LayerRange range);

// The Hugging Face name of a part ("model.layers.3.self_attn.q_proj.weight").
std::string tensor_name(Part part, int64_t layer = -1, int64_t expert = -1);
// Embedders are often saved from the base model (Qwen3-Embedding: `layers.0...`, `embed_tokens`,
// `norm`), without the `model.` the causal-LM class puts before them: the names get it, when the
// embedding is found only without it.
void add_base_model_prefix(std::map<std::string, Tensor>& tensors);
// llama.cpp's name of a part in a GGUF file ("blk.3.attn_q.weight"); experts are stacked
// into one tensor there, so a per-expert part has one name per layer.
std::string gguf_tensor_name(Part part, int64_t layer = -1);

// What a stage holding `range` needs, every tensor by name (experts expanded).
std::vector<TensorSpec> expected_tensors(const ModelSpec& spec, LayerRange range);
LayerRange full_range(const ModelSpec& spec);
// Throws InputError unless 0 <= first < last <= num_layers.
void check_range(const ModelSpec& spec, LayerRange range);

// Parameters of the whole model (tied embeddings counted once), and of what a stage
// holding `range` keeps; from the parts, without listing tensors.
int64_t parameter_count(const ModelSpec& spec);
int64_t parameter_count(const ModelSpec& spec, LayerRange range);
// expected_tensors(spec, range).size() without listing them: lets a loader refuse a file
// that cannot match before listing millions of names a hostile config asks for.
int64_t expected_tensor_count(const ModelSpec& spec, LayerRange range);

// llama.cpp's tensor names (gguf-py TENSOR_NAMES) as Hugging Face names: "blk.12.attn_q.weight"
// -> "model.layers.12.self_attn.q_proj.weight"; nullopt for names with no HF counterpart.
// `aliases` are an architecture's other names for layer parts ({its base name, the
// table's}: Architecture::gguf_aliases), `fused` its tensors that hold several parts ({its
// base name, the checkpoint's name in the layer}: Architecture::gguf_fused).
// Stacked expert tensors ("blk.N.ffn_up_exps.weight") map to a pattern,
// "model.layers.N.mlp.experts.{E}.up_proj.weight"; gguf_expert_name() fills it in.
std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name,
                                           const std::vector<std::pair<const char*, const char*>>& aliases = {},
                                           const std::vector<std::pair<const char*, const char*>>& fused = {});
bool gguf_is_stacked_experts(const std::string& gguf_name);
// llama.cpp's sidecars of an NVFP4 matrix "blk.N.X.weight": "blk.N.X.scale" (its f32
// scale) and "blk.N.X.input_scale".
bool gguf_is_nvfp4_sidecar(const std::string& gguf_name);
// The layer a "blk.N." name belongs to; -1 for names outside the layers.
int64_t gguf_layer_of(const std::string& gguf_name);
// A file tensor's name as an MTP head's spec reads it (gguf_to_hf_name then names it), or ""
// for one the head does not read. llama.cpp writes the head as block `head_block`, the
// first after the model's layers: its decoder layer under the usual names (the head's
// layer 0), its own parts as nextn.* and its final norm as nextn.shared_head_norm; the
// embedding and the LM head are the model's.
std::string gguf_mtp_head_name(const std::string& gguf_name, int64_t head_block);
std::string gguf_expert_name(const std::string& hf_pattern, int64_t expert);

// gpt-oss checkpoints (GptOssForCausalLM) call the router mlp.router and store each
// layer's experts stacked: gate and up rows interleaved in one gate_up_proj, MXFP4 codes
// (_blocks) and E8M0 scales (_scales) apart, biases stacked too. These are their names;
// engine/model/arch/gpt_oss_checkpoint turns them into the per-expert parts above.
enum class GptOssTensor : uint8_t { ROUTER, ROUTER_BIAS, GATE_UP_BLOCKS, GATE_UP_SCALES, GATE_UP_BIAS,
                                    DOWN_BLOCKS, DOWN_SCALES, DOWN_BIAS, GATE_UP, DOWN };
std::string gptoss_tensor_name(GptOssTensor t, int64_t layer);

}  // namespace spark
