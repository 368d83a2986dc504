// dashboard_config.cpp — serializes the typed config for the dashboard, redacting secrets.
#include "web/dashboard/dashboard_config.h"

namespace spark {

nlohmann::json redacted_config(const Config& c) {
  const auto& m = c.model;
  const auto& e = c.engine;
  const auto& s = c.server;
  const auto& p = c.peer;
  nlohmann::json keys = s.api_keys.empty()
                            ? nlohmann::json::array()
                            : nlohmann::json("(" + std::to_string(s.api_keys.size()) + " redacted)");
  return {
      {"source", c.source},
      {"model",
       {{"path", m.path},
        {"name", m.name},
        {"dtype", m.dtype},
        {"load_format", m.load_format},
        {"max_model_len", m.max_model_len},
        {"chat_template", m.chat_template},
        {"tokenizer", m.tokenizer}}},
      {"engine",
       {{"backend", e.backend},
        {"max_num_seqs", e.max_num_seqs},
        {"max_num_batched_tokens", e.max_num_batched_tokens},
        {"block_size", e.block_size},
        {"kv_cache_dtype", e.kv_cache_dtype},
        {"memory_fraction", e.memory_fraction},
        {"enable_prefix_caching", e.enable_prefix_caching},
        {"enable_chunked_prefill", e.enable_chunked_prefill},
        {"cuda_graphs", e.cuda_graphs},
        {"cpu_threads", e.cpu_threads}}},
      {"server",
       {{"host", s.host},
        {"port", s.port},
        {"api_keys", keys},
        {"api_key_file", s.api_key_file.empty() ? "" : s.api_key_file + " (contents redacted)"},
        {"max_queued_requests", s.max_queued_requests},
        {"max_body_bytes", s.max_body_bytes},
        {"request_timeout_s", s.request_timeout_s},
        {"drain_timeout_s", s.drain_timeout_s},
        {"cors_origins", s.cors_origins},
        {"dashboard", s.dashboard},
        {"dashboard_auth", s.dashboard_auth}}},
      {"peer",
       {{"enabled", p.enabled},
        {"role", p.role},
        {"head_addr", p.head_addr},
        {"transport", p.transport},
        {"nccl_ifname", p.nccl_ifname},
        {"nccl_ib_hca", p.nccl_ib_hca},
        {"layer_split", p.layer_split},
        {"timeout_s", p.timeout_s}}},
      {"log", {{"level", c.log.level}, {"format", c.log.format}}},
  };
}

}  // namespace spark
