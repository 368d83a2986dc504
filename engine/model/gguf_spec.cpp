// gguf_spec.cpp — GGUF llama-family metadata to ModelSpec.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/model/arch.h"
#include "engine/model/architecture.h"
#include "engine/model/gguf.h"
#include "engine/model/quant.h"
#include "engine/model/spec_readers.h"
#include "engine/util/check.h"

namespace spark {
namespace {

// Llama 3.x's frequency scaling as llama.cpp's converter stores it (a rope_freqs
// tensor of per-frequency divisors). The parameters are recovered by assuming the
// published low/high factors and original context, and accepted only if recomputing
// every divisor from them reproduces the tensor.
void recover_llama3_rope(const GgufFile& f, const GgufTensorInfo& t, ModelSpec& s) {
  int64_t n = s.head_dim / 2;
  if (t.dtype != DType::F32 || t.shape.size() != 1 || t.shape[0] != n)
    throw InputError("GGUF file '" + f.source + "': rope_freqs.weight must be F32 of " + std::to_string(n) + " values");
  std::vector<float> div(static_cast<size_t>(n));
  std::memcpy(div.data(), f.tensor_data(t), div.size() * 4);
  float factor = *std::max_element(div.begin(), div.end());
  RopeScaling r;
  r.type = "llama3";
  r.factor = factor;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 8192;
  double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
  double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
  for (int64_t i = 0; i < n; ++i) {
    double freq = 1.0 / std::pow(s.rope_theta, 2.0 * i / s.head_dim);
    double wavelen = 2 * M_PI / freq;
    double want = 1.0;
    if (wavelen > low_wavelen) {
      want = factor;
    } else if (wavelen >= high_wavelen) {
      double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                      (r.high_freq_factor - r.low_freq_factor);
      want = 1.0 / ((1 - smooth) / factor + smooth);
    }
    if (std::fabs(want - div[static_cast<size_t>(i)]) > 1e-3 * want)
      throw InputError("GGUF file '" + f.source +
                       "': rope_freqs.weight is not Llama 3 scaling with low/high factors 1/4 and original "
                       "context 8192; this rope scaling is not supported");
  }
  s.rope_scaling = r;
}

// llama.cpp's YaRN keys; whether the blended band is rounded to whole dimensions is the
// architecture's (gpt-oss's Hugging Face config says truncate: false).
void yarn_from_gguf(const GgufMetaReader& m, ModelSpec& s) {
  RopeScaling& y = s.rope_scaling;
  y.original_max_position_embeddings = m.integer("rope.scaling.original_context_length", 1, 1ll << 26, s.max_position_embeddings);
  y.beta_fast = m.number("rope.scaling.yarn_beta_fast", 32.0);
  y.beta_slow = m.number("rope.scaling.yarn_beta_slow", 1.0);
  if (!(y.beta_fast > 0) || !(y.beta_slow > 0)) m.fail(m.arch + ".rope.scaling.yarn_beta_fast", "and yarn_beta_slow must be positive");
  y.truncate = s.arch->gguf_yarn_truncates;
  y.attention_factor = y.factor <= 1 ? 1.0 : 0.1 * std::log(y.factor) + 1.0;
}

}  // namespace

ModelSpec spec_from_gguf(const GgufFile& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) throw InputError("GGUF file '" + f.source + "' has no general.architecture");
  ModelSpec s;
  s.arch = find_gguf_architecture(*arch);
  if (!s.arch)
    throw InputError("GGUF file '" + f.source + "': architecture '" + *arch + "' is not supported (supported: " +
                     gguf_architecture_list() + ")");
  s.architecture = s.arch->hf_class;
  GgufMetaReader m{f, *arch};
  s.hidden_size = m.integer("embedding_length", 1, 1 << 17);
  s.num_layers = m.integer("block_count", 1, 1 << 10);
  s.num_heads = m.integer("attention.head_count", 1, MAX_DIM);
  const GgufValue* kv_heads = f.find(*arch + ".attention.head_count_kv");
  if (s.arch->gguf_kv_heads_per_layer && kv_heads && kv_heads->type == GgufType::ARRAY)
    s.num_kv_heads = s.num_heads;  // read_gguf reads the array and sets it
  else
    s.num_kv_heads = m.integer("attention.head_count_kv", 1, s.num_heads, s.num_heads);
  if (s.num_heads % s.num_kv_heads != 0) m.fail(*arch + ".attention.head_count_kv", "must divide head_count");
  if (!f.find(*arch + ".attention.key_length") && s.hidden_size % s.num_heads != 0)
    m.fail(*arch + ".embedding_length", "is not a multiple of head_count");
  s.head_dim = m.integer("attention.key_length", 2, MAX_DIM, s.hidden_size / s.num_heads);
  if (m.integer("attention.value_length", 1, MAX_DIM, s.head_dim) != s.head_dim)
    m.fail(*arch + ".attention.value_length", "differs from key_length, which is not supported");
  if (s.head_dim % 2 != 0) m.fail(*arch + ".attention.key_length", "must be even");
  if (s.num_heads * s.head_dim > MAX_DIM) m.fail(*arch + ".attention.head_count", "x key_length is implausibly large");
  s.rms_norm_eps = m.number("attention.layer_norm_rms_epsilon", 1e-6);
  if (!(s.rms_norm_eps > 0)) m.fail(*arch + ".attention.layer_norm_rms_epsilon", "must be positive");
  s.rope_theta = m.number("rope.freq_base", 10000.0);
  if (!(s.rope_theta > 0)) m.fail(*arch + ".rope.freq_base", "must be positive");
  if (const int64_t rotary = m.integer("rope.dimension_count", 1, MAX_DIM, s.head_dim); rotary != s.head_dim) {
    if (!s.arch->gguf_partial_rotary || rotary > s.head_dim || rotary % 2 != 0)
      m.fail(*arch + ".rope.dimension_count", "= " + std::to_string(rotary) + " is not the head size " +
                                                  std::to_string(s.head_dim) +
                                                  (s.arch->gguf_partial_rotary ? " nor an even part of it" : " (partial rotary is not supported)"));
    s.rotary_dim = rotary;
  }
  s.max_position_embeddings = m.integer("context_length", 1, 1ll << 26, 2048);

  // The vocabulary size is the embedding's row count: the authority the weights obey.
  const std::string embd_name = gguf_tensor_name(Part::EMBEDDING);
  const GgufTensorInfo* embd = f.find_tensor(embd_name);
  if (!embd || embd->shape.size() != 2) throw InputError("GGUF file '" + f.source + "' has no 2-D " + embd_name);
  s.vocab_size = embd->shape[0];
  if (s.vocab_size < 1 || s.vocab_size > (1 << 24)) m.fail(embd_name, "has an implausible vocabulary size");
  s.tie_word_embeddings = f.find_tensor(gguf_tensor_name(Part::LM_HEAD)) == nullptr;
  s.attention_bias = f.find_tensor(gguf_tensor_name(Part::Q_BIAS, 0)) != nullptr;
  s.arch->read_gguf(m, s);

  if (auto type = f.get_string(*arch + ".rope.scaling.type"); type && *type != "none") {
    if (*type != "linear" && *type != "yarn")
      throw InputError("GGUF file '" + f.source + "': rope scaling '" + *type + "' is not supported (supported: linear, yarn)");
    s.rope_scaling.type = *type;
    s.rope_scaling.factor = m.number("rope.scaling.factor", 1.0);
    if (!(s.rope_scaling.factor >= 1.0)) m.fail(*arch + ".rope.scaling.factor", "must be at least 1");
    if (*type == "yarn") yarn_from_gguf(m, s);
  }
  // Gemma 4's read_gguf reads its rope_freqs (proportional RoPE) itself.
  if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight"); rf && s.rope_scaling.type != "proportional")
    recover_llama3_rope(f, *rf, s);

  auto id = [&](const char* key) -> int32_t {
    auto v = f.get_int(key);
    if (!v) return -1;
    if (*v < 0 || *v >= s.vocab_size) m.fail(key, "= " + std::to_string(*v) + " is outside the vocabulary");
    return static_cast<int32_t>(*v);
  };
  s.bos_token_id = id("tokenizer.ggml.bos_token_id");
  // Generation stops at EOS and at the end-of-turn / end-of-message tokens when given.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int32_t v = id(key);
    if (v >= 0 && std::find(s.eos_token_ids.begin(), s.eos_token_ids.end(), v) == s.eos_token_ids.end())
      s.eos_token_ids.push_back(v);
  }
  // The file's float type when it has one (0: F32, 1: F16, 32: BF16). Quantized files say
  // F16: their dequantized block values (f16 scale x small integer) keep closer in FP16's
  // 11 significand bits than in BF16's 8 (compute_dtype_name in backend_factory.h picks the
  // GPU's type from this, keeping the Qwen families in BF16).
  int64_t file_type = f.get_int("general.file_type").value_or(-1);
  s.dtype = file_type == 0 ? DType::F32 : file_type == 32 ? DType::BF16 : DType::F16;
  return s;
}

}  // namespace spark
