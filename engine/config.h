// config.h — the typed configuration of sparkd, parsed once from spark.toml.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

struct ModelConfig {
  std::string path;              // Hugging Face folder or .gguf file
  std::string name;              // served model id; "" = file or folder name
  std::string dtype = "auto";    // "auto" | "bf16" | "fp16"
  std::string load_format = "auto";  // "auto" | "dummy"
  int64_t max_model_len = 0;     // tokens; 0 = the model's own limit
  std::string chat_template;     // path override; "" = the model's own
  std::string tokenizer;         // path override; "" = from the model
  // 16-bit (and f32) weight matrices quantized as they load: "none" | "fp8" | "q8_0"; the
  // parts named in quantize_keep ("attention", "mlp", "experts", "lm_head", "embedding")
  // stay as stored (engine/model/load_quantization.h).
  std::string quantize = "none";
  std::vector<std::string> quantize_keep;
  // What the model serves: "chat" (generation), "embed" (/v1/embeddings: pooled, normalised
  // hidden states) or "rerank" (/v1/rerank and /v1/score: a relevance score per
  // query-document pair). Embedders and rerankers run without the LM head.
  std::string role = "chat";
  // [[models]] only: this model's fraction (0, 1] of the box's budget (MemAvailable x
  // engine.memory_fraction); 0 = unset: the models without one split what is left equally.
  double memory_share = 0;

  bool pools() const { return role != "chat"; }
};

struct EngineConfig {
  std::string backend = "auto";  // "auto" | "cuda" | "cpu"
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 8192;
  int64_t block_size = 16;
  std::string kv_cache_dtype = "auto";  // "auto" | "fp8"
  double memory_fraction = 0.85;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  bool cuda_graphs = true;
  int64_t cpu_threads = 0;       // 0 = every core
  // Speculative decoding (engine/core/speculator.h): "ngram" drafts up to
  // num_speculative_tokens tokens per step by prompt lookup, matching the context's last
  // prompt_lookup_max..prompt_lookup_min tokens against earlier text; "draft" runs the
  // model at speculative_model (same tokenizer) for them, "mtp" the model's own
  // multi-token-prediction head (engine/core/draft_model.h).
  std::string speculative = "none";  // "none" | "ngram" | "draft" | "mtp"
  std::string speculative_model;     // the draft model's folder or .gguf
  int64_t num_speculative_tokens = 4;
  int64_t prompt_lookup_min = 2;
  int64_t prompt_lookup_max = 4;
  // A model with recurrent layers resumes prompts from saved states
  // (engine/core/state_checkpoints.h): how many it keeps; -1 = twice max_num_seqs, 0 = none.
  int64_t state_checkpoints = -1;

  bool speculates() const { return speculative != "none" && num_speculative_tokens > 0; }
  // Drafts come from a model run beside the target (a draft model or the MTP head).
  bool drafts_from_model() const { return speculative == "draft" || speculative == "mtp"; }
  // The state checkpoints kept for a model with recurrent layers (none without prefix caching).
  int64_t checkpoint_slots() const {
    if (!enable_prefix_caching) return 0;
    return state_checkpoints < 0 ? 2 * max_num_seqs : state_checkpoints;
  }
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  int64_t max_queued_requests = 256;
  int64_t max_stored_responses = 256;  // /v1/responses kept for previous_response_id
  int64_t max_body_bytes = 8 << 20;
  double request_timeout_s = 600;
  double drain_timeout_s = 30;
  std::vector<std::string> cors_origins;
  bool dashboard = true;
  std::string dashboard_auth = "public";  // "public" | "api_key"
  std::string replica_name;               // "" = the machine's hostname
};

struct PeerConfig {
  bool enabled = false;
  std::string role = "head";       // "head" | "worker"
  std::string head_addr;           // host:port of the control channel
  std::string transport = "nccl";  // "nccl" | "tcp"
  std::string nccl_ifname;
  std::string nccl_ib_hca;
  std::string layer_split = "auto";  // "auto" or the first layer of the worker
  double timeout_s = 10;
};

struct LogConfig {
  std::string level = "info";  // "debug" | "info" | "warn" | "error"
  std::string format = "text"; // "text" | "json"
};

struct Config {
  std::string source;  // the file it came from, for messages
  ModelConfig model;   // the first of `models`, which every single-model caller runs
  // Every model this sparkd serves: [model] alone, or each [[models]] table in order
  // (always at least one after parsing; models[0] is `model`).
  std::vector<ModelConfig> models;
  EngineConfig engine;
  ServerConfig server;
  PeerConfig peer;
  LogConfig log;
};

// Reads and validates a TOML file, then applies "section.key=value" overrides (typed
// like the key). Throws InputError naming file:line:column, the key, what was found and
// what is accepted. Every check happens here, before anything starts.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from TOML text (tests; `source` names it in messages).
Config parse_config(const std::string& toml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});
// A config with every default and model.path set, for commands given --model PATH.
Config config_for_model(const std::string& model_path);

// The id clients name a model by: model.name, else the file or folder name (a GGUF's
// without ".gguf").
std::string served_model_name(const ModelConfig& model);
// Model `index`'s fraction of the box's budget: its memory_share, or an equal part of
// what the set shares leave (1 for a lone model).
double memory_share_of(const Config& config, size_t index);
// The Config model `index` loads and runs with: `model` (and `models`) that entry alone,
// engine.memory_fraction scaled by its share, so its memory plan takes only its part.
Config model_run_config(const Config& config, size_t index);

}  // namespace spark
