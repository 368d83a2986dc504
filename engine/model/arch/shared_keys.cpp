// shared_keys.cpp — config keys several architectures read the same way.
#include "engine/model/arch/shared_keys.h"

#include <algorithm>

namespace spark {

void refuse_attention_and_mlp_bias(const ConfigReader& r, const ModelSpec& s) {
  if (r.boolean_or("attention_bias", false)) r.fail("attention_bias", "= true is not supported for " + s.architecture);
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "= true is not supported");
}

void cap_context_at_sliding_window(const ConfigReader& r, ModelSpec& s, bool on_by_default) {
  if (r.has("sliding_window") && r.boolean_or("use_sliding_window", on_by_default)) {
    int64_t w = r.integer("sliding_window", 1, MAX_POSITIONS);
    s.max_position_embeddings = std::min(s.max_position_embeddings, w);
  }
}

void read_dense_mlp(const ConfigReader& r, ModelSpec& s) { s.intermediate_size = r.integer("intermediate_size", 1, MAX_DIM); }

void read_dense_mlp(const GgufMetaReader& m, ModelSpec& s) {
  s.intermediate_size = m.integer("feed_forward_length", 1, MAX_DIM);
}

}  // namespace spark
