// device_weights.cu — checks a stage's tensors against the spec, keeps GGUF block matrices
// packed (Q8_0 repacked, q8_0.h; MXFP4 experts split, mxfp4.h; Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K as the file's blocks,
// block_formats.h; NVFP4's blocks with a scale a row, nvfp4.h) or converts them to the compute type on the host, and uploads them into
// one device allocation.
#include "engine/backend/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/fp8.h"
#include "engine/backend/cuda/mxfp4.h"
#include "engine/backend/cuda/nvfp4.h"
#include "engine/backend/cuda/q8_0.h"
#include "engine/model/load_quantization.h"
#include "engine/model/quant.h"
#include "engine/util/mmap.h"
#include "engine/util/thread_pool.h"

namespace spark::cuda {

namespace {

constexpr size_t kAlign = 256;  // every piece starts on a 256-byte boundary (vector loads, cuBLASLt)
constexpr int64_t kQ8Block = 32;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

enum class Layout : uint8_t { F32_VECTOR, HALF_MATRIX, PACKED_MATRIX };
// What an f32 vector's values become on the way up: a zero-centred norm's weight w is used
// as 1 + w, a DeltaNet layer's A_log as the decay's factor -exp(A_log).
// OVER_SQRT_LEN: Gemma 4's router scale as the router's norm weight, scale / sqrt(hidden).
enum class VectorMap : uint8_t { AS_STORED, PLUS_ONE, NEG_EXP, OVER_SQRT_LEN };

// Consecutive sources of a packed matrix stored in one format: one DeviceMatrix of the
// chain (kernel_args.h), at `offset` bytes from the piece's start.
struct Segment {
  WeightFormat format;
  size_t first = 0, count = 0;  // sources
  int64_t rows = 0;
  size_t offset = 0;
};

// Device bytes of `rows` rows of `cols` values in packed `format`, and, for Q8_0 and FP8,
// where the scales start (after the one-byte quants). FP8 rows are `matrices` matrices of
// equal rows (an expert stack; else 1), each with its scale grid: the spec's blocks, or at
// most one scale a row (per channel; per tensor takes one).
size_t scales_offset(int64_t rows, int64_t cols) { return align_up(size_t(rows * cols)); }
size_t packed_bytes(WeightFormat f, int64_t rows, int64_t cols, int64_t fp8_block_rows, int64_t fp8_block_cols,
                    int64_t matrices) {
  if (f == WeightFormat::Q8_0) return scales_offset(rows, cols) + align_up(size_t(rows * (cols / kQ8Block)) * 2);
  if (f == WeightFormat::MXFP4) return mxfp4_bytes(rows, cols);
  if (f == WeightFormat::NVFP4) return nvfp4_bytes(rows, cols);
  if (f == WeightFormat::FP8) {
    const int64_t each = rows / matrices;
    const int64_t grid = fp8_block_rows > 0 ? ceil_div(each, fp8_block_rows) * ceil_div(cols, fp8_block_cols) : each;
    return scales_offset(rows, cols) + align_up(size_t(grid * matrices) * 4);
  }
  return align_up(size_t(rows * block_row_bytes(f, cols)));
}

// One device array made of source tensors stacked along rows (q, k and v into qkv).
struct Piece {
  std::vector<const Tensor*> sources;  // empty when only the sizes matter (the memory plan)
  std::vector<int64_t> rows;           // rows of each source; for a vector, each source's length
  int64_t cols = 0;                    // 1 for a vector
  Layout layout = Layout::HALF_MATRIX;
  std::vector<WeightFormat> formats;  // PACKED_MATRIX: each source's
  const void** dst = nullptr;       // vectors
  VectorMap map = VectorMap::AS_STORED;  // vectors
  DeviceMatrix* matrix = nullptr;  // matrices
  size_t offset = 0;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;  // the spec's FP8 scale blocks
  // An MoE layer's experts: sources of equal shape, FP8 ones stacked in one segment.
  bool expert_stack = false;
  // The share of the piece a batch-1 decode step reads: top_k / num_experts of an MoE
  // layer's experts, none of an embedding that is not also the LM head, else all.
  double read_per_token = 1.0;

  int64_t total_rows() const {
    int64_t n = 0;
    for (int64_t r : rows) n += r;
    return n;
  }
  size_t elements() const { return size_t(total_rows()) * size_t(cols); }
  size_t segment_bytes(const Segment& s) const {
    return packed_bytes(s.format, s.rows, cols, fp8_block_rows, fp8_block_cols, int64_t(s.count));
  }
  std::vector<Segment> segments() const {
    std::vector<Segment> out;
    size_t offset = 0;
    for (size_t i = 0; i < formats.size(); ++i) {
      // FP8 sources keep their own scale grids: one segment each, but for an expert stack,
      // which the MoE kernels read as one segment (weight_readers.cuh).
      const bool own = formats[i] == WeightFormat::FP8 && !expert_stack;
      if (out.empty() || out.back().format != formats[i] || own) {
        if (!out.empty()) offset += segment_bytes(out.back());
        out.push_back(Segment{formats[i], i, 0, 0, offset});
      }
      out.back().count += 1;
      out.back().rows += rows[i];
    }
    return out;
  }
  size_t bytes() const {
    switch (layout) {
      case Layout::F32_VECTOR: return align_up(elements() * 4);
      case Layout::HALF_MATRIX: return align_up(elements() * 2);
      case Layout::PACKED_MATRIX: {
        const std::vector<Segment> segs = segments();
        return segs.back().offset + segment_bytes(segs.back());
      }
    }
    return 0;
  }
};

template <typename T>
const void** slot(const T*& p) {
  return reinterpret_cast<const void**>(&p);
}

// Rows [r0, r0 + n) of t as a tensor of their own (whole rows: every format's blocks run
// along a row; ModelOpt's NVFP4 codes and block scales too). An FP8 view keeps the scales
// of its rows: one per tensor as it is, a grid only when the range starts and ends on its
// block rows.
Tensor row_range(const Tensor& t, int64_t r0, int64_t n) {
  const size_t row_bytes = t.nbytes / size_t(t.rows());
  Tensor v = t;
  v.name = t.name + " rows " + std::to_string(r0) + ".." + std::to_string(r0 + n);
  v.shape = {n, t.cols()};
  v.data = static_cast<const char*>(t.data) + size_t(r0) * row_bytes;
  v.nbytes = size_t(n) * row_bytes;
  if (t.modelopt_block_scales) {  // ModelOpt's NVFP4 as the file holds it: codes and scales apart
    v.data = static_cast<const uint8_t*>(t.data) + r0 * t.cols() / 2;
    v.modelopt_block_scales = t.modelopt_block_scales + r0 * t.cols() / 16;
  }
  if (t.scale && t.scale_block_rows >= t.rows()) {
    v.scale_block_rows = n;
  } else if (t.scale) {
    if (r0 % t.scale_block_rows != 0 || n % t.scale_block_rows != 0)
      throw InputError("FP8 tensor " + t.name + ": its scale blocks of " + std::to_string(t.scale_block_rows) +
                       " rows split rows " + std::to_string(r0) + ".." + std::to_string(r0 + n) +
                       ", which the CUDA backend reads apart (the attention output gate's)");
    v.scale = t.scale + (r0 / t.scale_block_rows) * t.scale_grid_cols();
  }
  return v;
}

// The pieces of `range` in upload order, formats chosen from `stored`. With `stage` and
// `w`, the pieces carry their source tensors and `w` receives the device pointers; with
// both null only the sizes matter (the memory plan). `views` keeps the row ranges some
// pieces are made of.
std::vector<Piece> layout(const ModelSpec& s, LayerRange range, const StoredDType& stored, const StageWeights* stage,
                          DeviceWeights* w, std::deque<Tensor>* views) {
  static const void* sink = nullptr;
  static DeviceMatrix matrix_sink;
  const int64_t H = s.hidden_size, nh = s.num_heads, I = s.intermediate_size;
  std::vector<Piece> out;
  // A matrix stays packed when every part it fuses is in a packed format (each its own,
  // Q4_K_M mixes Q4_K and Q6_K) and its rows are whole blocks of each.
  auto matrix = [&](std::vector<const Tensor*> from, std::vector<Part> parts, int64_t layer, std::vector<int64_t> rows,
                    int64_t cols, DeviceMatrix* d) {
    std::vector<WeightFormat> formats;
    for (Part p : parts) {
      const std::optional<WeightFormat> f = packed_format(stored(p, layer));
      // An FP8 table is gathered from 16-bit rows (FP8 checkpoints keep it 16-bit anyway);
      // fp8.h reads scale blocks of whole 16-value units.
      const bool fp8_ok = p != Part::EMBEDDING && s.fp8_block_cols % 16 == 0;
      // MXFP4 is read by the MoE kernels only (gpt-oss keeps nothing else in it); NVFP4
      // by every matrix kernel but the embedding gather.
      const bool mxfp4_ok = part_is_per_expert(p);
      const bool nvfp4_ok = p != Part::EMBEDDING;
      if (f && cols % block_values(*f) == 0 && (f != WeightFormat::FP8 || fp8_ok) &&
          (f != WeightFormat::MXFP4 || mxfp4_ok) && (f != WeightFormat::NVFP4 || nvfp4_ok))
        formats.push_back(*f);
    }
    const bool packed = formats.size() == parts.size();
    if (!packed) formats.clear();
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(rows), cols,
                        packed ? Layout::PACKED_MATRIX : Layout::HALF_MATRIX, std::move(formats), nullptr,
                        VectorMap::AS_STORED, d});
    out.back().fp8_block_rows = s.fp8_block_rows;
    out.back().fp8_block_cols = s.fp8_block_cols;
  };
  auto vec = [&](std::vector<const Tensor*> from, std::vector<int64_t> lengths, const void** d,
                 VectorMap map = VectorMap::AS_STORED) {
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(lengths), 1,
                        Layout::F32_VECTOR, {}, d, map, nullptr});
  };
  const VectorMap norm_map = s.norm_plus_one ? VectorMap::PLUS_ONE : VectorMap::AS_STORED;
  if (range.first_layer == 0) {
    matrix({stage ? stage->embedding : nullptr}, {Part::EMBEDDING}, -1, {s.vocab_size}, H,
           w ? &w->embedding : &matrix_sink);
    if (!s.tie_word_embeddings || range.last_layer != s.num_layers || s.encoder)
      out.back().read_per_token = 0;  // one row a token
    if (s.mtp_head) {  // the head's input stage (mtp_input.h)
      matrix({stage ? stage->mtp_fc : nullptr}, {Part::MTP_FC}, -1, {H}, 2 * H, w ? &w->mtp_fc : &matrix_sink);
      vec({stage ? stage->mtp_embed_norm : nullptr}, {H}, w ? slot(w->mtp_embed_norm) : &sink, norm_map);
      vec({stage ? stage->mtp_hidden_norm : nullptr}, {H}, w ? slot(w->mtp_hidden_norm) : &sink, norm_map);
    }
    if (s.is_assistant()) {  // Gemma 4's assistant's own stages around its layers (cuda_backend.cu)
      const int64_t W = s.assistant_of_hidden;
      matrix({stage ? stage->assist_in : nullptr}, {Part::ASSIST_IN}, -1, {H}, 2 * W, w ? &w->assist_in : &matrix_sink);
      matrix({stage ? stage->assist_out : nullptr}, {Part::ASSIST_OUT}, -1, {W}, H, w ? &w->assist_out : &matrix_sink);
      if (s.num_centroids > 0)
        matrix({stage ? stage->centroids : nullptr}, {Part::CENTROIDS}, -1, {s.num_centroids}, H,
               w ? &w->centroids : &matrix_sink);
    }
    if (s.encoder) {  // the input's positions, token types and LayerNorm (embedding.h)
      vec({stage ? stage->pos_embedding : nullptr}, {s.position_rows * H}, w ? slot(w->pos_embedding) : &sink);
      out.back().read_per_token = 0;  // one row a token
      if (s.type_vocab_size > 0)
        vec({stage ? stage->type_embedding : nullptr}, {s.type_vocab_size * H}, w ? slot(w->type_embedding) : &sink);
      vec({stage ? stage->embed_norm : nullptr}, {H}, w ? slot(w->embed_norm) : &sink);
      vec({stage ? stage->embed_norm_bias : nullptr}, {H}, w ? slot(w->embed_norm_bias) : &sink);
    }
  }
  if (w) w->layers.assign(size_t(range.last_layer - range.first_layer), DeviceLayer{});
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    const size_t index = size_t(l - range.first_layer);
    DeviceLayer* L = w ? &w->layers[index] : nullptr;
    auto m = [&](DeviceMatrix DeviceLayer::*member) { return L ? &(L->*member) : &matrix_sink; };
    auto v = [&](const float* DeviceLayer::*member) { return L ? slot(L->*member) : &sink; };
    auto t = [&](Part part) { return stage ? stage->layers[index].find(part) : nullptr; };
    // Gemma 4's full layers have attention geometry of their own.
    const int64_t hd = s.layer_head_dim(l), nkv = s.layer_num_kv_heads(l);
    // A Nemotron-H layer is one block: a mixer or a feed-forward, each with its norm.
    const bool mixer = s.layer_has_mixer(l), ffn = s.layer_has_ffn(l);
    if (mixer) vec({t(Part::ATTN_NORM)}, {H}, v(&DeviceLayer::attn_norm), norm_map);
    if (ffn) vec({t(Part::FFN_NORM)}, {H}, v(&DeviceLayer::ffn_norm), norm_map);
    if (s.sandwich_norms) {
      vec({t(Part::POST_ATTN_NORM)}, {H}, v(&DeviceLayer::post_attn_norm), norm_map);
      vec({t(Part::POST_FFN_NORM)}, {H}, v(&DeviceLayer::post_ffn_norm), norm_map);
    }
    if (s.layer_scalar) vec({t(Part::LAYER_SCALAR)}, {1}, v(&DeviceLayer::layer_scalar));
    if (s.encoder) {  // LayerNorms with biases
      vec({t(Part::ATTN_NORM_BIAS)}, {H}, v(&DeviceLayer::attn_norm_bias));
      vec({t(Part::FFN_NORM_BIAS)}, {H}, v(&DeviceLayer::ffn_norm_bias));
    }
    if (!mixer) {
      // the feed-forward below
    } else if (s.layer_is_recurrent(l) && s.mamba2_layers()) {
      const ModelSpec::Mamba2& mb = s.mamba2;
      matrix({t(Part::SSM_IN)}, {Part::SSM_IN}, l, {mb.in_proj_rows()}, H, m(&DeviceLayer::ssm_in));
      matrix({t(Part::SSM_OUT)}, {Part::SSM_OUT}, l, {H}, mb.inner(), m(&DeviceLayer::ssm_out));
      vec({t(Part::SSM_CONV)}, {mb.conv_dim() * mb.conv_kernel}, v(&DeviceLayer::ssm_conv));
      if (mb.conv_bias) vec({t(Part::SSM_CONV_BIAS)}, {mb.conv_dim()}, v(&DeviceLayer::ssm_conv_bias));
      vec({t(Part::SSM_A_LOG)}, {mb.num_heads}, v(&DeviceLayer::ssm_neg_exp_a), VectorMap::NEG_EXP);
      vec({t(Part::SSM_D)}, {mb.num_heads}, v(&DeviceLayer::ssm_d));
      vec({t(Part::SSM_DT_BIAS)}, {mb.num_heads}, v(&DeviceLayer::ssm_dt_bias));
      vec({t(Part::SSM_NORM)}, {mb.inner()}, v(&DeviceLayer::ssm_norm));
    } else if (s.layer_is_recurrent(l)) {
      const ModelSpec::DeltaNet& d = s.delta_net;
      matrix({t(Part::LIN_QKV)}, {Part::LIN_QKV}, l, {d.conv_dim()}, H, m(&DeviceLayer::lin_qkv));
      matrix({t(Part::LIN_Z)}, {Part::LIN_Z}, l, {d.value_dim()}, H, m(&DeviceLayer::lin_z));
      matrix({t(Part::LIN_B)}, {Part::LIN_B}, l, {d.num_v_heads}, H, m(&DeviceLayer::lin_b));
      matrix({t(Part::LIN_A)}, {Part::LIN_A}, l, {d.num_v_heads}, H, m(&DeviceLayer::lin_a));
      matrix({t(Part::LIN_OUT)}, {Part::LIN_OUT}, l, {H}, d.value_dim(), m(&DeviceLayer::lin_out));
      vec({t(Part::LIN_CONV)}, {d.conv_dim() * d.conv_kernel}, v(&DeviceLayer::lin_conv));
      vec({t(Part::LIN_A_LOG)}, {d.num_v_heads}, v(&DeviceLayer::lin_neg_exp_a), VectorMap::NEG_EXP);
      vec({t(Part::LIN_DT_BIAS)}, {d.num_v_heads}, v(&DeviceLayer::lin_dt_bias));
      vec({t(Part::LIN_NORM)}, {d.v_head_dim}, v(&DeviceLayer::lin_norm));
    } else if (s.attn_output_gate) {
      // q_proj yields per head the query, then the gate: the queries go first and the gates
      // after v, so that q, k and v keep their places (rope_kv.h reads them so).
      std::vector<const Tensor*> from;
      std::vector<int64_t> rows;
      std::vector<Part> parts;
      for (int half = 0; half < 2; ++half) {
        for (int64_t h = 0; h < nh; ++h) {
          if (stage) from.push_back(&views->emplace_back(row_range(*t(Part::Q), (2 * h + half) * hd, hd)));
          rows.push_back(hd);
          parts.push_back(Part::Q);
        }
        if (half == 0) {
          from.insert(from.end(), {t(Part::K), t(Part::V)});
          rows.insert(rows.end(), {nkv * hd, nkv * hd});
          parts.insert(parts.end(), {Part::K, Part::V});
        }
      }
      matrix(std::move(from), std::move(parts), l, std::move(rows), H, m(&DeviceLayer::qkv));
    } else if (s.is_assistant()) {  // queries only: it reads its model's K and V (layer_forward.cu)
      matrix({t(Part::Q)}, {Part::Q}, l, {nh * hd}, H, m(&DeviceLayer::qkv));
    } else if (!s.layer_has_v_proj(l)) {  // Gemma 4's K = V layers: the values are the keys' rows
      matrix({t(Part::Q), t(Part::K)}, {Part::Q, Part::K}, l, {nh * hd, nkv * hd}, H, m(&DeviceLayer::qkv));
    } else {
      matrix({t(Part::Q), t(Part::K), t(Part::V)}, {Part::Q, Part::K, Part::V}, l, {nh * hd, nkv * hd, nkv * hd}, H,
             m(&DeviceLayer::qkv));
    }
    if (mixer && !s.layer_is_recurrent(l)) {
      if (s.attention_bias || s.encoder)
        vec({t(Part::Q_BIAS), t(Part::K_BIAS), t(Part::V_BIAS)}, {nh * hd, nkv * hd, nkv * hd},
            v(&DeviceLayer::qkv_bias));
      if (s.qk_norm) {
        vec({t(Part::Q_NORM)}, {hd}, v(&DeviceLayer::q_norm), norm_map);
        if (!s.is_assistant()) vec({t(Part::K_NORM)}, {hd}, v(&DeviceLayer::k_norm), norm_map);
      }
      matrix({t(Part::O)}, {Part::O}, l, {H}, nh * hd, m(&DeviceLayer::o));
      if (s.o_bias || s.encoder) vec({t(Part::O_BIAS)}, {H}, v(&DeviceLayer::o_bias));
      if (s.attention_sinks) vec({t(Part::SINKS)}, {nh}, v(&DeviceLayer::sinks));
    }
    if (!ffn) continue;
    // Squared-ReLU feed-forwards (Nemotron-H) and encoders' GELU MLPs have no gate rows:
    // "gate_up" holds the up rows.
    const bool gated = !s.relu2_mlp && !s.encoder;
    if (!s.layer_is_moe(l)) {
      if (gated)
        matrix({t(Part::GATE), t(Part::UP)}, {Part::GATE, Part::UP}, l, {I, I}, H, m(&DeviceLayer::gate_up));
      else
        matrix({t(Part::UP)}, {Part::UP}, l, {I}, H, m(&DeviceLayer::gate_up));
      matrix({t(Part::DOWN)}, {Part::DOWN}, l, {H}, I, m(&DeviceLayer::down));
      if (s.encoder) {
        vec({t(Part::UP_BIAS)}, {I}, v(&DeviceLayer::up_bias));
        vec({t(Part::DOWN_BIAS)}, {H}, v(&DeviceLayer::down_bias));
      }
      continue;
    }
    const int64_t E = s.num_experts, mi = s.moe_intermediate_size;
    if (s.moe_beside_mlp) {  // Gemma 4: the dense MLP beside the experts, the block's norms and scales
      matrix({t(Part::GATE), t(Part::UP)}, {Part::GATE, Part::UP}, l, {I, I}, H, m(&DeviceLayer::gate_up));
      matrix({t(Part::DOWN)}, {Part::DOWN}, l, {H}, I, m(&DeviceLayer::down));
      vec({t(Part::MOE_NORM)}, {H}, v(&DeviceLayer::moe_norm), norm_map);
      vec({t(Part::POST_MLP_NORM)}, {H}, v(&DeviceLayer::post_mlp_norm), norm_map);
      vec({t(Part::POST_MOE_NORM)}, {H}, v(&DeviceLayer::post_moe_norm), norm_map);
      vec({t(Part::ROUTER_INPUT_SCALE)}, {H}, v(&DeviceLayer::router_norm), VectorMap::OVER_SQRT_LEN);
      vec({t(Part::EXPERT_SCALE)}, {E}, v(&DeviceLayer::expert_scale));
    }
    vec({t(Part::ROUTER)}, {E * H}, v(&DeviceLayer::router));
    if (s.sigmoid_router) vec({t(Part::ROUTER_SCORE_BIAS)}, {E}, v(&DeviceLayer::router_score_bias));
    // Every expert's gate and up rows, then every expert's down rows: one matrix each.
    std::vector<const Tensor*> gate_up, down;
    for (int64_t e = 0; e < E && stage; ++e) {
      const LayerWeights& lw = stage->layers[index];
      if (gated) gate_up.push_back(lw.expert_gate[size_t(e)]);
      gate_up.push_back(lw.expert_up[size_t(e)]);
      down.push_back(lw.expert_down[size_t(e)]);
    }
    // One part a source (every expert of a layer has the same dtype). The MoE kernels
    // read a stack in one format (FP8: each expert's scale grids after the previous
    // one's); experts of mixed dtypes are converted to 16 bits.
    auto experts = [&](std::vector<const Tensor*> from, std::vector<Part> parts, int64_t rows, int64_t cols,
                       DeviceMatrix* d) {
      std::vector<Part> each;
      for (int64_t e = 0; e < E; ++e) each.insert(each.end(), parts.begin(), parts.end());
      matrix(std::move(from), each, l, std::vector<int64_t>(each.size(), rows), cols, d);
      Piece& p = out.back();
      p.expert_stack = true;
      if (p.layout == Layout::PACKED_MATRIX && p.segments().size() > 1) {
        p.layout = Layout::HALF_MATRIX;
        p.formats.clear();
      }
      p.read_per_token = double(s.num_experts_per_tok) / double(E);
    };
    // LatentMoE (Nemotron-3-Super): the experts read and write the latent vector.
    const int64_t in = s.moe_latent_size ? s.moe_latent_size : H;
    if (s.moe_latent_size) {
      matrix({t(Part::MOE_LATENT_IN)}, {Part::MOE_LATENT_IN}, l, {in}, H, m(&DeviceLayer::moe_latent_in));
      matrix({t(Part::MOE_LATENT_OUT)}, {Part::MOE_LATENT_OUT}, l, {H}, in, m(&DeviceLayer::moe_latent_out));
    }
    experts(gate_up, gated ? std::vector<Part>{Part::EXPERT_GATE, Part::EXPERT_UP} : std::vector<Part>{Part::EXPERT_UP},
            mi, in, m(&DeviceLayer::expert_gate_up));
    experts(down, {Part::EXPERT_DOWN}, in, mi, m(&DeviceLayer::expert_down));
    if (const int64_t si = s.shared_expert_intermediate_size; si > 0) {
      if (gated)
        matrix({t(Part::SHARED_GATE), t(Part::SHARED_UP)}, {Part::SHARED_GATE, Part::SHARED_UP}, l, {si, si}, H,
               m(&DeviceLayer::shared_gate_up));
      else
        matrix({t(Part::SHARED_UP)}, {Part::SHARED_UP}, l, {si}, H, m(&DeviceLayer::shared_gate_up));
      matrix({t(Part::SHARED_DOWN)}, {Part::SHARED_DOWN}, l, {H}, si, m(&DeviceLayer::shared_down));
      if (!s.sigmoid_router)
        matrix({t(Part::SHARED_EXPERT_GATE)}, {Part::SHARED_EXPERT_GATE}, l, {1}, H,
               m(&DeviceLayer::shared_expert_gate));
    }
    if (s.gptoss_moe) {  // the biases in the experts' row order
      std::vector<const Tensor*> gate_up_bias, down_bias;
      for (int64_t e = 0; e < E && stage; ++e) {
        const LayerWeights& lw = stage->layers[index];
        gate_up_bias.insert(gate_up_bias.end(), {lw.expert_gate_bias[size_t(e)], lw.expert_up_bias[size_t(e)]});
        down_bias.push_back(lw.expert_down_bias[size_t(e)]);
      }
      vec({t(Part::ROUTER_BIAS)}, {E}, v(&DeviceLayer::router_bias));
      vec(std::move(gate_up_bias), std::vector<int64_t>(size_t(2 * E), mi), v(&DeviceLayer::expert_gate_up_bias));
      vec(std::move(down_bias), std::vector<int64_t>(size_t(E), H), v(&DeviceLayer::expert_down_bias));
      out.back().read_per_token = out[out.size() - 2].read_per_token = double(s.num_experts_per_tok) / double(E);
    }
  }
  if (range.last_layer == s.num_layers && !s.encoder) {  // an encoder has neither (its rows are pooled raw)
    vec({stage ? stage->final_norm : nullptr}, {H}, w ? slot(w->final_norm) : &sink, norm_map);
    // Tied models reuse the embedding; a stage without layer 0 loads it as its head.
    if (!s.tie_word_embeddings || range.first_layer != 0)
      matrix({stage ? stage->lm_head : nullptr}, {s.tie_word_embeddings ? Part::EMBEDDING : Part::LM_HEAD}, -1,
             {s.vocab_size}, H, w ? &w->lm_head : &matrix_sink);
  }
  size_t offset = 0;
  for (Piece& piece : out) {
    piece.offset = offset;
    offset += piece.bytes();
  }
  return out;
}


// Converts rows [0, t.rows()) of t to T (f32 or a 16-bit type) in chunks and copies them
// to dst, dropping each chunk's file pages behind it (upload_bytes, block_formats.h).
template <typename T>
void upload_as(const Tensor& t, char* dst, ThreadPool& pool) {
  const int64_t rows = t.rows(), cols = t.cols();
  const size_t row_bytes = t.nbytes / size_t(rows);
  const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kUploadChunk) / (cols * 4));
  std::vector<float> f(size_t(std::min(rows, chunk_rows) * cols));
  std::vector<T> out(f.size());
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = f.data() + r * cols;
        dequantize_tensor_row(t, r0 + r, row);
        for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = static_cast<T>(row[c]);
      }
    });
    CUDA_CHECK(cudaMemcpy(dst + size_t(r0 * cols) * sizeof(T), out.data(), size_t(n * cols) * sizeof(T),
                          cudaMemcpyHostToDevice));
    release_mapped_pages(static_cast<const char*>(t.data) + size_t(r0) * row_bytes, size_t(n) * row_bytes);
  }
}

// An f32 vector with its values mapped (VectorMap); vectors are small, so in one go.
void upload_mapped(const Tensor& t, VectorMap map, char* dst) {
  std::vector<float> f(size_t(t.numel()));
  for (int64_t r = 0; r < t.rows(); ++r) dequantize_tensor_row(t, r, f.data() + r * t.cols());
  const float root = std::sqrt(static_cast<float>(f.size()));
  for (float& x : f)
    x = map == VectorMap::PLUS_ONE ? 1.0f + x : map == VectorMap::NEG_EXP ? -std::exp(x) : x / root;
  CUDA_CHECK(cudaMemcpy(dst, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
}

void upload(const Tensor& t, bool f32, HalfType type, char* dst, ThreadPool& pool) {
  const DType native = type == HalfType::F16 ? DType::F16 : DType::BF16;
  if (!f32 && t.dtype == native) {  // already the device format: straight from the mapping
    upload_bytes(dst, t.data, size_t(t.numel()) * 2);
    return;
  }
  if (f32) return upload_as<float>(t, dst, pool);
  if (type == HalfType::F16) return upload_as<f16>(t, dst, pool);
  upload_as<bf16>(t, dst, pool);
}

// A 16-bit or f32 matrix quantized to Q8_0 or FP8 ([model] quantize) on its way up: bands
// of rows quantized on the host (load_quantization.h) and uploaded as a file's Q8_0 or FP8
// rows would be, each band's file pages dropped behind it; no copy of the whole matrix.
void upload_quantized(const Tensor& t, const ModelSpec& spec, DType to, char* data, char* scales, ThreadPool& pool) {
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t band = to == DType::F8_E4M3 ? fp8_load_block_rows(spec) : 1;
  const int64_t block_cols = fp8_load_block_cols(spec, cols), grid_cols = ceil_div(cols, block_cols);
  const int64_t chunk = std::max<int64_t>(1, int64_t(kUploadChunk) / (cols * 4) / band) * band;
  const size_t row_bytes = dtype_nbytes(to, cols, cols), src_row_bytes = t.nbytes / size_t(rows);
  std::vector<uint8_t> q(size_t(std::min(chunk, rows)) * row_bytes);
  std::vector<float> s(size_t(ceil_div(std::min(chunk, rows), band) * grid_cols));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    pool.parallel_for(ceil_div(n, band), 1, [&](int64_t begin, int64_t end) {
      const int64_t a = begin * band, b = std::min(end * band, n);
      quantize_rows(t, spec, r0 + a, b - a, to, q.data() + size_t(a) * row_bytes, s.data() + (a / band) * grid_cols);
    });
    Tensor v;
    v.name = t.name;
    v.dtype = to;
    v.shape = {n, cols};
    v.data = q.data();
    v.nbytes = size_t(n) * row_bytes;
    if (to == DType::Q8_0) {
      upload_q8_0(v, data + r0 * cols, scales + r0 * (cols / kQ8Block) * 2);
    } else {
      v.scale = s.data();
      v.scale_block_rows = band;
      v.scale_block_cols = block_cols;
      upload_fp8(v, data + r0 * cols, scales + (r0 / band) * grid_cols * 4);
    }
    release_mapped_pages(static_cast<const char*>(t.data) + size_t(r0) * src_row_bytes, size_t(n) * src_row_bytes);
  }
}

// The FP8 scale blocks of a source: its own, or those it is quantized with at load.
std::pair<int64_t, int64_t> fp8_blocks(const Tensor& t, const ModelSpec& spec) {
  if (t.dtype == DType::F8_E4M3) return {t.scale_block_rows, t.scale_block_cols};
  return {fp8_load_block_rows(spec), fp8_load_block_cols(spec, t.cols())};
}

// Each segment of a packed piece (Piece::segments) becomes one DeviceMatrix of the chain
// that starts at `head`; the tails are kept in `tails` (stable addresses). Sources in F32,
// F16 or BF16 in a Q8_0 or FP8 segment are quantized on the way (upload_quantized).
void upload_packed(const Piece& p, const ModelSpec& spec, char* dst, DeviceMatrix& head,
                   std::deque<DeviceMatrix>& tails, ThreadPool& pool) {
  DeviceMatrix* m = &head;
  const std::vector<Segment> segs = p.segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& seg = segs[i];
    char* base = dst + seg.offset;
    *m = DeviceMatrix{seg.format, base, nullptr, segs.size() > 1 ? int32_t(seg.rows) : 0, nullptr};
    if (seg.format == WeightFormat::Q8_0 || seg.format == WeightFormat::FP8)
      m->scales = base + scales_offset(seg.rows, p.cols);
    if (seg.format == WeightFormat::MXFP4) m->scales = base + mxfp4_scales_offset(seg.rows, p.cols);
    if (seg.format == WeightFormat::NVFP4) m->scales = base + nvfp4_scales_offset(seg.rows, p.cols);
    int64_t row0 = 0;
    size_t scale_at = scales_offset(seg.rows, p.cols);  // FP8: where the next source's scale grid goes
    for (size_t s = seg.first; s < seg.first + seg.count; ++s) {
      const Tensor* t = p.sources[s];
      SPARK_CHECK(t != nullptr, "a device piece lacks a bound tensor");
      const bool quantize = t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16;
      if (seg.format == WeightFormat::Q8_0) {
        char* scales = base + scales_offset(seg.rows, p.cols) + row0 * (p.cols / kQ8Block) * 2;
        if (quantize)
          upload_quantized(*t, spec, DType::Q8_0, base + row0 * p.cols, scales, pool);
        else
          upload_q8_0(*t, base + row0 * p.cols, scales);
      } else if (seg.format == WeightFormat::FP8) {  // one source, or a stack of equal matrices
        const auto [block_rows, block_cols] = fp8_blocks(*t, spec);
        if (s == seg.first) {
          m->scale_block_rows = int32_t(block_rows);
          m->scale_block_cols = int32_t(block_cols);
        }
        SPARK_CHECK(t->rows() == seg.rows / int64_t(seg.count) && block_rows == m->scale_block_rows &&
                        block_cols == m->scale_block_cols,
                    "FP8 expert " + t->name + ": checked by check_fp8_stack");
        const size_t scale_bytes = size_t(ceil_div(t->rows(), block_rows) * ceil_div(t->cols(), block_cols)) * 4;
        SPARK_CHECK(scale_at + scale_bytes <= p.segment_bytes(seg),
                    "FP8 " + t->name + ": its scale grid is larger than the spec's blocks allow");
        if (quantize)
          upload_quantized(*t, spec, DType::F8_E4M3, base + row0 * p.cols, base + scale_at, pool);
        else
          upload_fp8(*t, base + row0 * p.cols, base + scale_at);
        scale_at += scale_bytes;
      } else if (seg.format == WeightFormat::MXFP4) {
        upload_mxfp4(*t, base + row0 * (p.cols / 2), base + mxfp4_scales_offset(seg.rows, p.cols) + row0 * (p.cols / 32));
      } else if (seg.format == WeightFormat::NVFP4) {
        upload_nvfp4(*t, base + row0 * nvfp4_row_bytes(p.cols),
                     reinterpret_cast<float*>(base + nvfp4_scales_offset(seg.rows, p.cols)) + row0);
      } else
        upload_blocks(*t, base + row0 * block_row_bytes(seg.format, p.cols));
      row0 += t->rows();
    }
    if (i + 1 < segs.size()) {
      tails.emplace_back();
      m->tail = &tails.back();
      m = &tails.back();
    }
  }
}

// The experts of an FP8 stack share one scale layout (the kernels read one block shape
// for the stack); a file mixing per-tensor and per-channel scales across them is refused.
void check_fp8_stack(const Piece& p, const ModelSpec& spec) {
  if (!p.expert_stack || p.layout != Layout::PACKED_MATRIX || p.formats.front() != WeightFormat::FP8) return;
  const Tensor* first = p.sources.front();
  for (const Tensor* t : p.sources)
    if (fp8_blocks(*t, spec) != fp8_blocks(*first, spec))
      throw InputError("FP8 expert " + t->name + ": its scales are laid out unlike those of " + first->name +
                       "; the experts of a layer must share one scale layout");
}

StoredDType stored_in(const StageWeights& stage) {
  // A tied head asks as EMBEDDING; a stage without layer 0 holds it as lm_head only.
  return [&stage](Part part, int64_t layer) {
    const LayerWeights* lw = layer >= 0 ? &stage.layers[size_t(layer - stage.range.first_layer)] : nullptr;
    const std::vector<const Tensor*>* experts = !lw                           ? nullptr
                                                : part == Part::EXPERT_GATE ? &lw->expert_gate
                                                : part == Part::EXPERT_UP   ? &lw->expert_up
                                                : part == Part::EXPERT_DOWN ? &lw->expert_down
                                                                            : nullptr;
    if (experts) {  // one dtype for the stack: the experts', or F32 (16-bit on the device) when they differ
      for (const Tensor* e : *experts)
        if (e->dtype != experts->front()->dtype) return DType::F32;
      return experts->empty() ? DType::F32 : experts->front()->dtype;
    }
    const Tensor* t = lw                                        ? lw->find(part)
                      : part == Part::MTP_FC                       ? stage.mtp_fc
                      : part == Part::ASSIST_IN                    ? stage.assist_in
                      : part == Part::ASSIST_OUT                   ? stage.assist_out
                      : part == Part::CENTROIDS                    ? stage.centroids
                      : part == Part::EMBEDDING && stage.embedding ? stage.embedding
                                                                   : stage.lm_head;
    SPARK_CHECK(t != nullptr, "a device matrix lacks a bound tensor");
    return t->dtype;
  };
}

}  // namespace

uint64_t DeviceWeights::bytes(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  const std::vector<Piece> pieces = layout(spec, range, stored, nullptr, nullptr, nullptr);
  uint64_t total = 0;
  for (const Piece& p : pieces) total += p.bytes();
  return total;
}

uint64_t DeviceWeights::bytes_per_token(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  double total = 0;
  for (const Piece& p : layout(spec, range, stored, nullptr, nullptr, nullptr)) total += double(p.bytes()) * p.read_per_token;
  return uint64_t(total);
}

DeviceWeights::DeviceWeights(const ModelSpec& spec, const StageWeights& stage, HalfType half,
                             const WeightQuantization& quantize)
    : type(half) {
  const LayerRange range = stage.range;
  // Check everything before the first byte moves: a bad file fails fast and whole.
  for (const Tensor* t : all_tensors(stage))
    if (!dequant_supported(t->dtype))
      throw InputError("tensor " + t->name + " has dtype " + std::string(dtype_name(t->dtype)) +
                       ", which the CUDA backend cannot read");
  std::vector<Piece> pieces =
      layout(spec, range, served_dtypes(stored_in(stage), quantize, spec), &stage, this, &row_views_);
  for (const Piece& p : pieces) check_fp8_stack(p, spec);
  const size_t total = pieces.empty() ? 0 : pieces.back().offset + pieces.back().bytes();
  // Loading and checking the file (block scales, headers, readahead) left pages of it in
  // the page cache. On unified memory they would sit beside the allocation below: drop
  // them first; the upload reads each chunk once more and drops it again, and at the end
  // what the kernel's readahead and shared folios kept. Pages are clean copies of a read-only file,
  // so anything still reading the mapping (a CPU backend on the same Weights) reads them
  // back from the file.
  std::map<const uint8_t*, size_t> files;  // whole files: see mapped_file_of
  for (const Tensor* t : all_tensors(stage))
    if (const std::span<const uint8_t> f = mapped_file_of(t->data); !f.empty()) files[f.data()] = f.size();
  auto drop_file_pages = [&files] {
    for (const auto& [start, size] : files) release_mapped_pages(start, size);
  };
  drop_file_pages();
  CUDA_CHECK(cudaMalloc(&arena_, std::max<size_t>(total, kAlign)));
  ThreadPool pool(0);
  char* base = static_cast<char*>(arena_);
  size_t next_drop = kUploadChunk;  // device offset after which the file's pages are dropped again
  for (const Piece& p : pieces) {
    // Each upload drops its chunks' pages, but a folio that straddles two tensors stays
    // until both are done: every kUploadChunk uploaded, the whole files are dropped.
    if (p.offset >= next_drop) {
      drop_file_pages();
      next_drop = p.offset + kUploadChunk;
    }
    char* dst = base + p.offset;
    if (p.dst) *p.dst = dst;
    if (p.layout == Layout::PACKED_MATRIX) {
      upload_packed(p, spec, dst, *p.matrix, tails_, pool);
      continue;
    }
    if (p.matrix) p.matrix->data = dst;
    size_t row0 = 0;  // rows of this piece uploaded so far
    for (const Tensor* t : p.sources) {
      SPARK_CHECK(t != nullptr, "a device piece lacks a bound tensor");
      const size_t elem = p.layout == Layout::F32_VECTOR ? 4 : 2;
      if (p.map != VectorMap::AS_STORED)
        upload_mapped(*t, p.map, dst + row0 * size_t(p.cols) * elem);
      else
        upload(*t, p.layout == Layout::F32_VECTOR, type, dst + row0 * size_t(p.cols) * elem, pool);
      row0 += size_t(t->numel() / p.cols);
    }
  }
  drop_file_pages();
  // Tied, and this stage holds both.
  if (range.last_layer == spec.num_layers && !lm_head.data) lm_head = embedding;
}

DeviceWeights::~DeviceWeights() {
  if (arena_) cudaFree(arena_);
}

}  // namespace spark::cuda
