// cuda_backend.cu — the forward pass on the GPU: batch upload, the embedding (an MTP head's
// input stage after it, mtp_input.h; an encoder's positions and LayerNorm, embedding.h),
// the layers (layer_forward.h), decode steps through CUDA graphs, the LM head, and logits
// or device-sampled tokens (an encoder: its pooled rows as they are) back to the host; the
// device memory of the weights, activations, KV cache and recurrent states.
#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/assistant.h"
#include "engine/backend/cuda/attention.h"
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/boundary.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/decode_graphs.h"
#include "engine/backend/cuda/delta_net.h"
#include "engine/backend/cuda/device_info.h"
#include "engine/backend/cuda/device_weights.h"
#include "engine/backend/cuda/embedding.h"
#include "engine/backend/cuda/f32_scale.h"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/kv_block_copy.h"
#include "engine/backend/cuda/layer_forward.h"
#include "engine/backend/cuda/mamba2.h"
#include "engine/backend/cuda/model_checks.h"
#include "engine/backend/cuda/moe.h"
#include "engine/backend/cuda/mtp_input.h"
#include "engine/backend/cuda/rms_norm.h"
#include "engine/backend/cuda/rope_kv.h"
#include "engine/backend/cuda/step_buffers.h"
#include "engine/backend/cuda/sampling.h"
#include "engine/model/layer_shape.h"
#include "engine/step/window_blocks.h"
#include "engine/util/log.h"

namespace spark {

using cuda::Activations;
using cuda::aligned;
using cuda::BatchLayout;
using cuda::HalfType;
using cuda::moe_config;
using cuda::range_has;
using cuda::Sizes;

namespace {

HalfType half_type(const CudaOptions& o) { return o.f16 ? HalfType::F16 : HalfType::BF16; }

cuda::KvDtype kv_dtype(const CudaOptions& o) {
  if (o.fp8_kv) return cuda::KvDtype::FP8;
  return o.f16 ? cuda::KvDtype::F16 : cuda::KvDtype::BF16;
}

// The attention geometries of a stage's layers, each once: one for most models, two for
// Gemma 4 (its full layers have their own kv heads and 512-wide heads). Each gets its own
// Attention (its kernels' tiles and its split-K workspace follow the head width).
struct AttentionPlan {
  std::vector<cuda::AttentionShape> shapes;
  std::vector<int> of_layer;  // per layer of the stage: its shape's index, or -1 without attention
};

AttentionPlan attention_plan(const std::vector<LayerShape>& layers, const CudaOptions& o, const Sizes& z) {
  AttentionPlan plan;
  for (const LayerShape& l : layers) {
    if (!l.attends()) {
      plan.of_layer.push_back(-1);
      continue;
    }
    cuda::AttentionShape a;
    a.num_heads = int32_t(l.num_heads);
    a.num_kv_heads = int32_t(l.num_kv_heads);
    a.head_dim = int32_t(l.head_dim);
    a.block_size = int32_t(o.block_size);
    a.compute = half_type(o);
    a.kv_dtype = kv_dtype(o);
    a.max_tokens = int32_t(z.max_tokens);
    a.max_seqs = int32_t(z.max_seqs);
    a.max_blocks_per_seq = int32_t(z.stride);
    a.scale = float(l.attention_scale);  // 1/sqrt(head_dim), Gemma 3's query_pre_attn_scalar^-1/2, Gemma 4's 1
    const auto same = [&](const cuda::AttentionShape& b) {
      return b.num_kv_heads == a.num_kv_heads && b.head_dim == a.head_dim && b.num_heads == a.num_heads &&
             b.scale == a.scale;
    };
    const auto it = std::find_if(plan.shapes.begin(), plan.shapes.end(), same);
    plan.of_layer.push_back(int(it - plan.shapes.begin()));
    if (it == plan.shapes.end()) plan.shapes.push_back(a);
  }
  return plan;
}

// Rows a step may hold at about the cost of one (rows_at_decode_cost). Packed weights go
// through the GEMV up to kGemvMaxRows rows and through one row tile, each weight decoded
// once for every row, up to 64 (packed_gemm.h): with every linear layer packed, a step of
// 16 rows reads the bytes a step of one does and adds ~2 x 16 FLOPs a weight of
// tensor-core work. 16-bit weights past kGemvMaxRows rows go to cuBLASLt, and each row of
// an MoE layer reads its own experts, so those stop at kGemvMaxRows. (Verified rows also
// read their sequence's KV each: rows_as_sequences.)
constexpr int32_t kPackedDecodeRows = 16;

int32_t decode_cost_rows_of(const cuda::DeviceWeights& w) {
  for (const cuda::DeviceLayer& l : w.layers) {
    if (l.expert_gate_up.data) return cuda::kGemvMaxRows;
    for (const cuda::DeviceMatrix* m : {&l.qkv, &l.o, &l.gate_up, &l.down, &l.lin_qkv, &l.lin_z, &l.lin_b, &l.lin_a,
                                        &l.lin_out, &l.ssm_in, &l.ssm_out})
      if (m->data && m->format == cuda::WeightFormat::HALF) return cuda::kGemvMaxRows;
  }
  return kPackedDecodeRows;
}

// The rows decode graphs cover: every decode step, and every step of at most
// rows_at_decode_cost() rows (where drafts are verified), whatever max_num_seqs is.
int32_t graph_rows(const CudaOptions& o) { return int32_t(std::max<int64_t>(o.max_num_seqs, kPackedDecodeRows)); }

int32_t largest_bucket(const CudaOptions& o) { return cuda::DecodeGraphs(graph_rows(o)).largest_bucket(); }

}  // namespace

struct CudaBackend::Impl {
  ModelSpec spec;
  CudaOptions opt;
  LayerRange range;
  std::vector<LayerShape> shapes;  // the stage's layers, as layer_shape.h describes them
  bool has_embedding = false, has_head = false;
  // The last stage of an encoder (ModelSpec::encoder): no final norm and no LM head; the
  // batch's hidden rows are returned as the last layer left them.
  bool raw_rows = false;
  std::string device_name;
  int cc_major = 0, cc_minor = 0;
  // Decode-step kernels start while the one before them finishes (launch_kernel in
  // common.cuh): options.programmatic_launch on sm_90 and later.
  bool programmatic = false;
  Sizes sizes;
  BatchLayout layout;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::DeviceWeights> weights;
  int32_t decode_cost_rows = cuda::kGemvMaxRows;  // decode_cost_rows_of(*weights)
  std::unique_ptr<cuda::Gemm> gemm;
  std::vector<std::unique_ptr<cuda::Attention>> attentions;  // one per geometry (AttentionPlan)
  std::vector<cuda::Attention*> attention_of;                // per layer of the stage, or null
  std::unique_ptr<cuda::DeviceSampler> sampler;
  std::unique_ptr<cuda::DecodeGraphs> graphs;
  std::optional<cuda::MoeScratch> moe;
  std::vector<cuda::RopeArgs> ropes;  // each layer's, as LayerStep takes them
  cuda::MtpInput mtp;  // an MTP head's input stage (ModelSpec::mtp_head); unset otherwise
  void* act_arena = nullptr;
  Activations act;
  int32_t* host_ints = nullptr;  // pinned, BatchLayout
  cuda::KvShape kv;
  std::vector<cuda::KvLayer> cache;
  void* kv_arena = nullptr;
  int64_t num_blocks = 0;
  // Blocks the sliding-window layers hold (init_windowed_kv_cache), and the full-attention
  // layers' caches in device memory, for the block copies.
  int64_t window_blocks = 0;
  const cuda::KvLayer* full_layers = nullptr;
  int32_t num_full_layers = 0;
  // boundary_input() was called: the next run starts from act.boundary.
  bool boundary_in = false;
  CudaStepCounts counts;
  // The recurrent layers' states (init_state_slots): per slot, each recurrent layer's
  // DeltaNet::state_values() f32 values in layer order (as the CPU backend keeps them).
  int64_t num_recurrent = 0;
  std::vector<int64_t> recurrent_index;  // per layer of the stage: its place among the recurrent ones, or -1
  float* states = nullptr;
  int64_t num_state_slots = 0;
  // Gemma 4's assistant (attach_model): its model's backend, the model's layer each held
  // layer reads the K and V of (-1: none), and each token's cluster on the device (null
  // without clusters).
  const Impl* model = nullptr;
  std::vector<int64_t> model_layer;
  int32_t* token_cluster = nullptr;

  Impl(const ModelSpec& s, const CudaOptions& o, LayerRange r)
      : spec(s),
        opt(o),
        range(r),
        sizes(s, o, largest_bucket(o), r),
        layout(sizes.max_tokens, sizes.max_seqs, sizes.stride, sizes.max_rows) {}

  ~Impl() {
    // Streams and buffers go after the work on them; errors here have nowhere to go.
    if (stream) cudaStreamSynchronize(stream);
    graphs.reset();
    sampler.reset();
    attentions.clear();
    gemm.reset();
    weights.reset();
    if (kv_arena) cudaFree(kv_arena);
    if (states) cudaFree(states);
    if (token_cluster) cudaFree(token_cluster);
    if (act_arena) cudaFree(act_arena);
    if (host_ints) cudaFreeHost(host_ints);
    if (stream) cudaStreamDestroy(stream);
  }

  cuda::DeviceBatch device_batch(int32_t tokens, int32_t seqs) const {
    cuda::DeviceBatch b;
    b.token_ids = act.ints + layout.tokens;
    b.positions = act.ints + layout.positions;
    b.slot_mapping = act.ints + layout.slots;
    b.query_start = act.ints + layout.query_start;
    b.context_lens = act.ints + layout.context_lens;
    b.block_tables = act.ints + layout.block_tables;
    b.state_slots = act.ints + layout.state_slots;
    b.state_query_start = act.ints + layout.state_query_start;
    b.max_blocks_per_seq = int32_t(sizes.stride);
    b.num_tokens = tokens;
    b.num_seqs = seqs;
    return b;
  }

  void check_batch(const Batch& b, bool needs_ids) const;
  bool sliding(size_t l) const { return shapes[l].window > 0; }
  int64_t state_slot_values() const { return num_recurrent * spec.recurrent_state_values(); }
  void copy_states(const Batch& b);
  Batch padded(const Batch& b, int32_t bucket) const;
  static Batch rows_as_sequences(const Batch& b, bool causal);
  void count(bool multi_row, std::optional<cuda::DecodeGraphs::Use> use);
  void upload(const Batch& b, const Batch& step);
  HalfType half() const { return half_type(opt); }
  cuda::LayerStep layer_step() const {
    return {spec, shapes, *weights, act, *gemm, attention_of, moe ? &*moe : nullptr, ropes, kv, cache, states,
            state_slot_values(), recurrent_index, half()};
  }
  int32_t run(const Batch& batch, const float* hidden_in);
  void warm_graph(int32_t bucket);
  // Runs `work` (queueing kernels from its start: the input included, since a retry starts
  // over), and once more without programmatic launches if the runtime refused one.
  // Programmatic launches are young in drivers and graph capture (they are reported to
  // fail capture on some GPUs): a launch the runtime refuses costs the overlap, not the
  // step. A failed kernel would fail again here and go on up.
  template <typename F>
  void with_launch_fallback(const F& work) {
    try {
      work();
    } catch (const RuntimeError& e) {
      if (!programmatic) throw;
      log_warn("cuda: programmatic dependent launch failed (", e.what(), "); running without it");
      cudaGetLastError();  // the refused launch's error, which the retry must not report
      programmatic = false;
      work();
    }
  }
  void copy_final_hidden(const Batch& batch, std::vector<float>& out);
  // Gemma 4's assistant (assistant.h): its input stage, and before each step the model's
  // K and V its layers read, checked against the batch.
  cuda::AssistantInput assistant_input_stage() const;
  void read_model_kv(const Batch& batch, const float* hidden_in);

  // An encoder's first layer reads x and x rounded to T in act.normed (layer_forward.h): on
  // the first stage x = LayerNorm(token + position + type 0) over the gathered tokens, which
  // writes both; a later stage rounds the x it received.
  template <typename Half>
  void encoder_input(bool received, int32_t rows, const cuda::DeviceBatch& db) {
    const int32_t H = int32_t(spec.hidden_size);
    if (received) return cuda::hidden_to_16bit<Half>(act.x, int64_t(rows) * H, static_cast<Half*>(act.normed), stream);
    cuda::encoder_position_rows(db.positions, rows, weights->pos_embedding, spec.position_offset, spec.position_rows,
                                weights->type_embedding, H, act.proj, stream);
    cuda::add_layer_norm<Half>(act.x, act.proj, nullptr, weights->embed_norm, weights->embed_norm_bias, rows, H,
                               float(spec.rms_norm_eps), static_cast<Half*>(act.normed), stream);
  }
};

void CudaBackend::Impl::check_batch(const Batch& b, bool needs_ids) const {
  SPARK_CHECK(!cache.empty(), "forward before init_kv_cache");
  cpu::validate_batch(b, cpu::KvGeometry{num_blocks, opt.block_size, spec.num_kv_heads, spec.head_dim});
  auto fail = [](const std::string& m) { throw InputError("invalid batch: " + m); };
  if (b.num_tokens() > sizes.max_tokens)
    fail(std::to_string(b.num_tokens()) + " tokens exceed the " + std::to_string(sizes.max_tokens) +
         " the CUDA backend was sized for (engine.max_num_batched_tokens)");
  if (b.num_seqs() > sizes.max_seqs)
    fail(std::to_string(b.num_seqs()) + " sequences exceed engine.max_num_seqs = " + std::to_string(sizes.max_seqs));
  if (int64_t(b.logits_rows.size()) > sizes.max_rows)
    fail(std::to_string(b.logits_rows.size()) + " logits rows exceed " + std::to_string(sizes.max_rows));
  for (int32_t c : b.context_lens)
    if (c > sizes.stride * opt.block_size)
      fail("a context of " + std::to_string(c) +
           " tokens exceeds max_model_len = " + std::to_string(opt.max_model_len));
  if (window_blocks < num_blocks) check_window_blocks(b, window_blocks, opt.block_size, spec.sliding_window);
  if (num_recurrent > 0) cpu::validate_state_slots(b, num_state_slots);
  if (needs_ids)
    for (int32_t id : b.token_ids)
      if (id < 0 || id >= spec.vocab_size)
        throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                         std::to_string(spec.vocab_size));
  if (spec.encoder) {
    // Every row attends to its whole sequence: a sequence must run whole in one step
    // (SchedulerConfig::whole_prompts), within the learned positions.
    for (int32_t s = 0; s < b.num_seqs(); ++s)
      if (b.context_lens[size_t(s)] != b.query_start[size_t(s) + 1] - b.query_start[size_t(s)])
        fail("an encoder's sequence " + std::to_string(s) + " does not run whole in this step");
    for (int32_t p : b.positions)
      if (p < 0 || spec.position_offset + p >= spec.position_rows)
        fail("position " + std::to_string(p) + " is outside the encoder's " +
             std::to_string(spec.position_rows - spec.position_offset) + " learned positions");
  }
}

// A decode-only batch grown to `bucket` sequences of one row each: padding rows write no
// KV (slot -1) and attend to nothing (context 0).
Batch CudaBackend::Impl::padded(const Batch& b, int32_t bucket) const {
  Batch p = b;
  const int32_t n = b.num_seqs();
  p.token_ids.resize(size_t(bucket), 0);
  p.positions.resize(size_t(bucket), 0);
  p.slot_mapping.resize(size_t(bucket), -1);
  p.context_lens.resize(size_t(bucket), 0);
  p.query_start.resize(size_t(bucket) + 1);
  for (int32_t i = n; i <= bucket; ++i) p.query_start[size_t(i)] = i;
  p.block_tables.resize(size_t(bucket) * size_t(std::max(b.max_blocks_per_seq, 0)), 0);
  return p;
}

// The same step with every query row as a sequence of its own: row i of a sequence of n
// rows and context c becomes a one-row sequence of context c - n + i + 1 over the same
// block table, which is exactly the causal prefix that row attends to (c itself when not
// `causal`: an encoder's rows see the whole sequence). Its KV is written
// (by slot) before attention reads it, as in the original step. So a step verifying
// drafts runs the decode kernels, and a decode graph, instead of the prefill tiles that
// prepare() uploads per step. The price: each row reads its sequence's KV itself, so a
// sequence verifying k drafts at context c reads about (k + 1) c tokens of KV where the
// tile kernel reads c (per layer, 2 x num_kv_heads x head_dim x 2 bytes a token in BF16),
// while the weights, which dominate a decode step until c is in the thousands, are read
// once either way. Only steps of at most rows_at_decode_cost() rows take this path.
Batch CudaBackend::Impl::rows_as_sequences(const Batch& b, bool causal) {
  Batch r;
  r.token_ids = b.token_ids;
  r.positions = b.positions;
  r.slot_mapping = b.slot_mapping;
  r.logits_rows = b.logits_rows;
  r.hidden_rows = b.hidden_rows;
  r.max_blocks_per_seq = b.max_blocks_per_seq;
  r.query_start.push_back(0);
  const auto stride = size_t(std::max(b.max_blocks_per_seq, 0));
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const int32_t n = b.query_start[size_t(s) + 1] - b.query_start[size_t(s)];
    for (int32_t i = 0; i < n; ++i) {
      r.query_start.push_back(r.query_start.back() + 1);
      r.context_lens.push_back(causal ? b.context_lens[size_t(s)] - n + i + 1 : b.context_lens[size_t(s)]);
      r.block_tables.insert(r.block_tables.end(), b.block_tables.begin() + std::ptrdiff_t(size_t(s) * stride),
                            b.block_tables.begin() + std::ptrdiff_t(size_t(s + 1) * stride));
    }
  }
  return r;
}

void CudaBackend::Impl::count(bool multi_row, std::optional<cuda::DecodeGraphs::Use> use) {
  using Use = cuda::DecodeGraphs::Use;
  const Use u = use.value_or(Use::EAGER);
  if (u == Use::REPLAYED) ++(multi_row ? counts.multi_row_replayed : counts.decode_replayed);
  if (u == Use::CAPTURED) ++(multi_row ? counts.multi_row_captured : counts.decode_captured);
  if (u == Use::EAGER) ++(multi_row ? counts.multi_row_eager : counts.decode_eager);
}

// b is the step as the kernels run it (rows_as_sequences, padded to a graph bucket); the
// recurrent layers read `step`'s own sequences, padded to b's count with sequences of no
// rows and no state (delta_net.h).
void CudaBackend::Impl::upload(const Batch& b, const Batch& step) {
  const int32_t T = b.num_tokens(), S = b.num_seqs(), R = int32_t(b.logits_rows.size());
  int32_t* h = host_ints;
  // The previous step's copies read this pinned buffer; they are done once its forward
  // returned (it synchronised on the logits or samples), so rewriting it now is safe.
  std::copy(b.token_ids.begin(), b.token_ids.end(), h + layout.tokens);
  std::copy(b.positions.begin(), b.positions.end(), h + layout.positions);
  std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), h + layout.slots);
  std::copy(b.query_start.begin(), b.query_start.end(), h + layout.query_start);
  std::copy(b.context_lens.begin(), b.context_lens.end(), h + layout.context_lens);
  std::copy(b.logits_rows.begin(), b.logits_rows.end(), h + layout.logits_rows);
  const bool has_states = num_recurrent > 0;
  if (has_states) {
    std::copy(step.state_slots.begin(), step.state_slots.end(), h + layout.state_slots);
    std::fill(h + layout.state_slots + step.num_seqs(), h + layout.state_slots + S, -1);
    std::copy(step.query_start.begin(), step.query_start.end(), h + layout.state_query_start);
    std::fill(h + layout.state_query_start + step.num_seqs() + 1, h + layout.state_query_start + S + 1,
              step.num_tokens());
  }
  // Block tables: only the blocks the longest context uses, restrided to the fixed stride.
  int64_t used = 0;
  for (int32_t c : b.context_lens) used = std::max<int64_t>(used, (c + opt.block_size - 1) / opt.block_size);
  for (int32_t s = 0; s < S; ++s)
    std::copy_n(b.block_tables.begin() + int64_t(s) * b.max_blocks_per_seq, used,
                h + layout.block_tables + int64_t(s) * sizes.stride);
  auto copy = [&](int64_t offset, int64_t count) {
    if (count > 0)
      CUDA_CHECK(cudaMemcpyAsync(act.ints + offset, h + offset, size_t(count) * 4, cudaMemcpyHostToDevice, stream));
  };
  copy(layout.tokens, T);
  copy(layout.positions, T);
  copy(layout.slots, T);
  copy(layout.query_start, S + 1);
  copy(layout.context_lens, S);
  copy(layout.logits_rows, R);
  if (has_states) {
    copy(layout.state_slots, S);
    copy(layout.state_query_start, S + 1);
  }
  if (used > 0 && S > 0)
    CUDA_CHECK(cudaMemcpy2DAsync(act.ints + layout.block_tables, size_t(sizes.stride) * 4, h + layout.block_tables,
                                 size_t(sizes.stride) * 4, size_t(used) * 4, size_t(S), cudaMemcpyHostToDevice,
                                 stream));
}

// Each (source, destination) state copy of the step, before anything of the step reads a
// state (outside a graph: the pairs change every step). A pipeline stage without recurrent
// layers holds no states: the head's copies are for the other stage's.
void CudaBackend::Impl::copy_states(const Batch& b) {
  if (num_recurrent == 0) return;
  const auto values = size_t(state_slot_values());
  for (size_t i = 0; i + 1 < b.state_copies.size(); i += 2)
    CUDA_CHECK(cudaMemcpyAsync(states + size_t(b.state_copies[i + 1]) * values, states + size_t(b.state_copies[i]) * values,
                               values * 4, cudaMemcpyDeviceToDevice, stream));
}

// Runs the held layers (and the LM head on the last stage); returns the logits rows left
// in act.logits.
int32_t CudaBackend::Impl::run(const Batch& batch, const float* hidden_in) {
  CUDA_CHECK(cudaSetDevice(opt.device));
  const bool from_boundary = std::exchange(boundary_in, false) && !hidden_in && !has_embedding;
  // An MTP head embeds the batch's tokens and takes hidden_in beside them (mtp_input.h).
  check_batch(batch, spec.mtp_head || spec.is_assistant() || (hidden_in == nullptr && !from_boundary));
  if (spec.mtp_head && !hidden_in)
    throw InputError("an MTP head runs on the model's hidden states, and none came with the batch");
  if (spec.is_assistant()) read_model_kv(batch, hidden_in);
  if (!hidden_in && !has_embedding && !from_boundary)
    throw InputError("this pipeline stage needs hidden states from the previous stage");
  const int32_t S = batch.num_seqs();
  const bool decode_only = S > 0 && batch.num_tokens() == S;
  // A small step with a sequence of several rows (drafts to verify) replays a graph too.
  const bool multi_row = S > 0 && !decode_only && batch.num_tokens() <= decode_cost_rows;
  std::optional<Batch> flat;
  // (A recurrent layer still reads each sequence's rows in order, as one: upload.)
  if (graphs && multi_row) flat = rows_as_sequences(batch, !spec.encoder);
  const int32_t bucket = graphs && (decode_only || flat) ? graphs->bucket_for(batch.num_tokens()) : 0;
  std::optional<Batch> grown;
  if (bucket > 0) grown = padded(flat ? *flat : batch, bucket);
  const Batch& b = grown ? *grown : batch;
  upload(b, batch);
  // Before anything of the step writes KV (a block moved out may take new tokens now),
  // and outside a graph and the retry below (kv_block_copy.cu says why).
  cuda::copy_kv_blocks(batch.block_copies, full_layers, num_full_layers, kv, stream);
  copy_states(batch);
  bool graph_safe = true;
  for (const auto& a : attentions) graph_safe = a->prepare(b, stream) && graph_safe;
  const int32_t T = b.num_tokens();
  const int32_t H = int32_t(spec.hidden_size);
  cuda::DeviceBatch db = device_batch(T, b.num_seqs());
  const int32_t R = int32_t(batch.logits_rows.size());
  // From the input to the logits; x, the residual stream, is updated in place, so a
  // retry starts over from the input.
  std::optional<cuda::DecodeGraphs::Use> use;
  auto step = [&] {
    cuda::with_half_type(half(), [&](auto tag) {
      using Half = decltype(tag);
      if (spec.is_assistant())  // the model's embedding beside hidden_in (assistant.h)
        cuda::assistant_input(*gemm, half(), assistant_input_stage(), db.token_ids, hidden_in, batch.num_tokens(), T,
                              act.aux, act.wide, act.x, stream, programmatic);
      else if (hidden_in && !spec.mtp_head)
        CUDA_CHECK(cudaMemcpyAsync(act.x, hidden_in, size_t(batch.num_tokens()) * size_t(H) * 4, cudaMemcpyHostToDevice,
                                   stream));
      else if (from_boundary)
        cuda::hidden_from_16bit(static_cast<const cuda::bf16*>(act.boundary), int64_t(batch.num_tokens()) * H, act.x, stream);
      else
        cuda::embedding_rows(half(), weights->embedding, db.token_ids, T, spec.vocab_size, H, act.x, stream);
      // Gemma's normalizer, in f32 as the CPU backend applies it (cpu_backend.cpp says why).
      if (spec.scale_embedding && (!hidden_in || spec.mtp_head) && !from_boundary && !spec.is_assistant())
        cuda::scale_f32(act.x, int64_t(T) * H, float(std::sqrt(double(H))), stream);
      if (spec.encoder) encoder_input<Half>(hidden_in || from_boundary, T, db);
      // Outside any graph, as the gather: hidden_in changes every step. Padding rows (past
      // the batch's own) get a zero hidden half.
      if (spec.mtp_head)
        cuda::mtp_input(*gemm, half(), mtp, hidden_in, batch.num_tokens(), T, act.x, act.proj, act.wide, stream,
                        programmatic);
      if (bucket > 0 && graph_safe)
        use = graphs->run(bucket, stream, [&] { cuda::run_layers<Half>(layer_step(), db, stream, programmatic); });
      else
        cuda::run_layers<Half>(layer_step(), db, stream, programmatic);
      if (has_head && R > 0)
        cuda::rms_norm_rows<Half>(act.x, act.ints + layout.logits_rows, R, weights->final_norm, H,
                                  float(spec.rms_norm_eps), static_cast<Half*>(act.head_in), stream, programmatic);
    });
    if (has_head && R > 0) {
      gemm->linear(half(), act.head_in, R, H, weights->lm_head, int32_t(spec.vocab_size), act.logits,
                   cuda::GemmOut::F32, stream, cuda::GemmPath::AUTO, programmatic);
      if (spec.final_logit_softcap > 0)
        cuda::softcap_f32(act.logits, int64_t(R) * spec.vocab_size, float(spec.final_logit_softcap), stream);
      if (token_cluster) {  // Gemma 4's assistant: its best clusters' tokens only
        const auto C = int32_t(spec.num_centroids);
        gemm->linear(half(), act.head_in, R, H, weights->centroids, C, act.aux, cuda::GemmOut::F32, stream);
        cuda::mask_to_best_clusters(act.logits, act.aux, token_cluster, R, int32_t(spec.vocab_size), C,
                                    int32_t(spec.centroid_top_k), stream);
      }
    }
  };
  with_launch_fallback(step);
  if (decode_only || multi_row) count(multi_row, use);
  if (multi_row) counts.multi_row_most_rows = std::max<int64_t>(counts.multi_row_most_rows, batch.num_tokens());
  return has_head ? R : 0;
}

// The layers of a decode step of `bucket` padding rows, which write no KV (slot -1), attend
// to nothing (context 0) and have no state slot, run eagerly and then captured, as the
// first two steps of that size would (DecodeGraphs::run); the graph reads its rows from
// the same device buffers a live step fills, so a live step of that size only replays it.
// A capture costs a few milliseconds a bucket, which the first request of each batch size
// would otherwise wait on.
void CudaBackend::Impl::warm_graph(int32_t bucket) {
  const Batch none;
  const Batch b = padded(none, bucket);
  upload(b, none);
  for (const auto& a : attentions)
    if (!a->prepare(b, stream)) return;  // this size runs without a graph
  CUDA_CHECK(cudaMemsetAsync(act.x, 0, size_t(bucket) * size_t(spec.hidden_size) * 4, stream));
  const cuda::DeviceBatch db = device_batch(bucket, bucket);
  auto twice = [&] {
    cuda::with_half_type(half(), [&](auto tag) {
      using Half = decltype(tag);
      for (int i = 0; i < 2; ++i)
        graphs->run(bucket, stream, [&] { cuda::run_layers<Half>(layer_step(), db, stream, programmatic); });
    });
  };
  with_launch_fallback(twice);
}

// The batch's hidden rows after run(): the span of the residual stream that holds them
// goes through the final norm on the device, in f32 (the LM head's input is rounded to 16
// bits, these are not), and comes to the host in one copy.
void CudaBackend::Impl::copy_final_hidden(const Batch& batch, std::vector<float>& out) {
  out.clear();
  if (!(has_head || raw_rows) || batch.hidden_rows.empty()) return;
  const auto H = size_t(spec.hidden_size);
  const auto first = size_t(batch.hidden_rows.front()), span = size_t(batch.hidden_rows.back()) - first + 1;
  // act.proj is free once the step has run (the last layer's output is in x). An encoder's
  // rows have no final norm: they come from x itself.
  if (!raw_rows)
    cuda::rms_norm_strided<float>(act.x + first * H, int32_t(span), weights->final_norm, int32_t(H),
                                  float(spec.rms_norm_eps), act.proj, int64_t(H), stream);
  const float* from = raw_rows ? act.x + first * H : act.proj;
  // Gemma 4's assistant returns its hidden state in the model's width (ASSIST_OUT).
  const size_t width = spec.is_assistant() ? size_t(spec.assistant_of_hidden) : H;
  if (spec.is_assistant()) {
    cuda::assistant_hidden_out(*gemm, half(), weights->assist_out, act.proj, int32_t(span), int32_t(H), int32_t(width),
                               act.normed, act.aux, stream);
    from = act.aux;
  }
  std::vector<float> rows(span * width);
  CUDA_CHECK(cudaMemcpyAsync(rows.data(), from, rows.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  out.resize(batch.hidden_rows.size() * width);
  for (size_t r = 0; r < batch.hidden_rows.size(); ++r) {
    const float* row = rows.data() + (size_t(batch.hidden_rows[r]) - first) * width;
    std::copy(row, row + width, out.begin() + std::ptrdiff_t(r * width));
  }
}

cuda::AssistantInput CudaBackend::Impl::assistant_input_stage() const {
  const int64_t W = spec.assistant_of_hidden;
  return {&model->weights->embedding, model->spec.vocab_size, int32_t(W),
          model->spec.scale_embedding ? float(std::sqrt(double(W))) : 1.0f, &weights->assist_in,
          int32_t(spec.hidden_size)};
}

void CudaBackend::Impl::read_model_kv(const Batch& batch, const float* hidden_in) {
  if (!model) throw InputError("Gemma 4's assistant runs beside its model, and none was attached");
  if (!hidden_in) throw InputError("Gemma 4's assistant runs on the model's hidden states, and none came with the batch");
  SPARK_CHECK(model->cache.size() == size_t(model->spec.num_layers), "the assistant's model has no KV cache yet");
  // A window cache holds the sliding layers' K and V of recent blocks only: the rows must
  // not reach past them (they read window - 1 tokens, which the model's next query reads too).
  if (model->window_blocks < model->num_blocks)
    check_window_blocks(batch, model->window_blocks, opt.block_size, spec.sliding_window - 1);
  for (size_t l = 0; l < shapes.size(); ++l) {
    if (model_layer[l] < 0) continue;
    const cuda::KvLayer& c = model->cache[size_t(model_layer[l])];
    // Graphs hold the cache they were captured with: a model that reallocated its cache
    // (init_kv_cache again) outdates them.
    if (cache[l].k != c.k && graphs) graphs = std::make_unique<cuda::DecodeGraphs>(graph_rows(opt));
    cache[l] = c;
  }
}

void CudaBackend::attach_model(const Backend& model) {
  Impl& m = *impl_;
  if (!m.spec.is_assistant()) throw InputError("only Gemma 4's assistant reads the model it drafts for");
  const auto* other = dynamic_cast<const CudaBackend*>(&model);
  if (!other)
    throw InputError("Gemma 4's assistant runs on the CUDA backend beside a model on it, not beside " + model.describe());
  const Impl& o = *other->impl_;
  if (o.range.first_layer != 0 || o.range.last_layer != o.spec.num_layers)
    throw InputError("Gemma 4's assistant reads the model's last layers and its embedding: one box must hold the whole model");
  if (o.opt.device != m.opt.device || o.opt.f16 != m.opt.f16 || o.opt.fp8_kv != m.opt.fp8_kv ||
      o.opt.block_size != m.opt.block_size)
    throw InputError("Gemma 4's assistant reads the model's K and V in place: it runs on the model's device, in its "
                     "compute type, with its KV cache type and block size");
  const std::vector<int64_t> reads = assistant_model_layers(o.spec, m.spec);
  m.model_layer.assign(m.shapes.size(), -1);
  for (size_t l = 0; l < m.shapes.size(); ++l)
    if (m.shapes[l].reads_model_kv) m.model_layer[l] = reads[l];
  m.model = &o;
}

CudaBackend::CudaBackend(const ModelSpec& spec, const StageWeights& weights, const CudaOptions& options)
    : impl_(std::make_unique<Impl>(spec, options, weights.range)) {
  Impl& m = *impl_;
  const LayerRange r = m.range;
  m.shapes = cuda::checked_layer_shapes(spec, r);
  for (const LayerShape& shape : m.shapes)
    m.recurrent_index.push_back(shape.mixer == Mixer::RECURRENT || shape.mixer == Mixer::MAMBA2 ? m.num_recurrent++ : -1);
  m.has_embedding = r.first_layer == 0;
  m.has_head = r.last_layer == spec.num_layers && !spec.encoder;
  m.raw_rows = r.last_layer == spec.num_layers && spec.encoder;

  std::string why;
  auto devices = cuda_devices(&why);
  if (options.device < 0 || options.device >= int(devices.size()))
    throw RuntimeError("CUDA device " + std::to_string(options.device) +
                       " is not available: " + (why.empty() ? std::to_string(devices.size()) + " devices" : why));
  m.device_name = devices[size_t(options.device)].name;
  m.cc_major = devices[size_t(options.device)].cc_major;
  m.cc_minor = devices[size_t(options.device)].cc_minor;
  // Not on hybrids: a refused launch retries the step from its input (run()), and the
  // recurrent states the failed attempt updated in place would be updated twice.
  m.programmatic = options.programmatic_launch && m.cc_major >= 9 && m.num_recurrent == 0;
  CUDA_CHECK(cudaSetDevice(options.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));

  // One RoPE table for each base, scaling and head width the layers use (Gemma 3's and 4's
  // sliding layers have their own); made first, as cpu::Rope throws for a rope_scaling no
  // backend supports.
  using RopeKey = std::tuple<double, RopeScaling, int64_t, int64_t>;
  std::vector<RopeKey> rope_keys;
  std::vector<cpu::Rope> rope_tables;
  std::vector<size_t> rope_of_layer;
  for (const LayerShape& shape : m.shapes) {
    const RopeKey key{shape.rope_theta, shape.rope_scaling, shape.head_dim, shape.rotary_dim};
    const auto it = std::find(rope_keys.begin(), rope_keys.end(), key);
    rope_of_layer.push_back(size_t(it - rope_keys.begin()));
    if (it != rope_keys.end()) continue;
    rope_keys.push_back(key);
    rope_tables.emplace_back(shape.head_dim, shape.rotary_dim, shape.rope_theta, shape.rope_scaling);
  }
  SPARK_CHECK(int64_t(rope_tables.size()) <= cuda::rope_tables(spec), "more RoPE tables than the workspace holds");
  m.weights = std::make_unique<cuda::DeviceWeights>(spec, weights, m.half(), options.quantize);
  m.decode_cost_rows = decode_cost_rows_of(*m.weights);
  if (spec.mtp_head)
    m.mtp = {&m.weights->mtp_fc, m.weights->mtp_embed_norm, m.weights->mtp_hidden_norm, int32_t(spec.hidden_size),
             float(spec.rms_norm_eps)};
  if (spec.num_centroids > 0 && weights.token_ordering) {  // Gemma 4's assistant's clusters
    if (spec.num_centroids > cuda::kMaxClusters)
      throw InputError("model config: num_centroids = " + std::to_string(spec.num_centroids) +
                       "; the CUDA backend takes at most " + std::to_string(cuda::kMaxClusters));
    const std::vector<int32_t> cluster =
        cuda::token_clusters(read_token_ordering(*weights.token_ordering, spec.vocab_size), spec.num_centroids);
    CUDA_CHECK(cudaMalloc(&m.token_cluster, cluster.size() * 4));
    CUDA_CHECK(cudaMemcpy(m.token_cluster, cluster.data(), cluster.size() * 4, cudaMemcpyHostToDevice));
  }
  m.gemm = std::make_unique<cuda::Gemm>();
  const AttentionPlan plan = attention_plan(m.shapes, options, m.sizes);
  for (const cuda::AttentionShape& a : plan.shapes) m.attentions.push_back(std::make_unique<cuda::Attention>(a));
  for (int i : plan.of_layer) m.attention_of.push_back(i < 0 ? nullptr : m.attentions[size_t(i)].get());
  if (m.has_head)
    m.sampler = std::make_unique<cuda::DeviceSampler>(spec.vocab_size, spec.eos_token_ids, int32_t(m.sizes.max_rows),
                                                      options.max_model_len);
  if (options.cuda_graphs)
    m.graphs = std::make_unique<cuda::DecodeGraphs>(graph_rows(options));

  CUDA_CHECK(cudaMalloc(&m.act_arena, m.sizes.total()));
  char* p = static_cast<char*>(m.act_arena);
  auto take = [&](size_t bytes) {
    char* here = p;
    p += bytes;
    return here;
  };
  m.act.x = reinterpret_cast<float*>(take(m.sizes.x));
  m.act.normed = take(m.sizes.normed);
  m.act.wide = take(m.sizes.wide);
  m.act.q = take(m.sizes.q);
  m.act.mid = take(m.sizes.mid);
  m.act.proj = reinterpret_cast<float*>(take(m.sizes.proj));
  m.act.head_in = take(m.sizes.head_in);
  m.act.logits = reinterpret_cast<float*>(take(m.sizes.logits));
  m.act.inv_freq = reinterpret_cast<float*>(take(m.sizes.inv_freq));
  m.act.ints = reinterpret_cast<int32_t*>(take(m.sizes.ints));
  m.act.moe = take(m.sizes.moe);
  if (m.sizes.moe) m.moe.emplace(moe_config(spec), cuda::moe_chunk_tokens(m.sizes.max_tokens), m.act.moe);
  m.act.aux = reinterpret_cast<float*>(take(m.sizes.aux));
  m.act.boundary = take(m.sizes.boundary);
  for (size_t k = 0; k < rope_tables.size(); ++k)
    CUDA_CHECK(cudaMemcpy(m.act.inv_freq + int64_t(k) * (cuda::widest_head(spec) / 2), rope_tables[k].inv_freq().data(),
                          rope_tables[k].inv_freq().size() * 4, cudaMemcpyHostToDevice));
  for (size_t l = 0; l < m.shapes.size(); ++l) {
    const cpu::Rope& rope = rope_tables[rope_of_layer[l]];
    cuda::RopeArgs& a = m.ropes.emplace_back();
    a.inv_freq = m.act.inv_freq + int64_t(rope_of_layer[l]) * (cuda::widest_head(spec) / 2);
    a.position_scale = rope.position_scale();
    a.attention_scale = rope.attention_scale();
    a.rotary_dim = int32_t(m.shapes[l].rotary_dim);
    a.rotates = m.shapes[l].rope;  // no RoPE: Nemotron-H, and encoders (positions learned, in their input)
  }
  CUDA_CHECK(cudaMallocHost(&m.host_ints, size_t(m.layout.total) * 4));
  std::fill(m.host_ints, m.host_ints + m.layout.total, 0);
  // Block-table rows are read only up to each context's length, but start them valid.
  CUDA_CHECK(cudaMemset(m.act.ints, 0, m.sizes.ints));
  // The uploads and memsets above ran on the legacy stream, which the non-blocking
  // compute stream does not wait for: finish them before any step can be queued.
  CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::describe() const {
  const Impl& m = *impl_;
  const std::string half = m.opt.f16 ? "fp16" : "bf16";
  return "cuda (" + m.device_name + ", sm_" + std::to_string(m.cc_major) + std::to_string(m.cc_minor) + ", " + half +
         (m.opt.fp8_kv ? ", fp8 KV" : ", " + half + " KV") + (m.opt.cuda_graphs ? ", graphs" : "") +
         (m.programmatic ? ", programmatic launch" : "") + ")";
}

LayerRange CudaBackend::layers() const { return impl_->range; }

uint64_t CudaBackend::kv_bytes_per_token(const ModelSpec& spec, LayerRange range, bool fp8_kv, bool sliding_only) {
  const KvTokenSize n = kv_token_size(spec, range, sliding_only);
  return fp8_kv ? n.values + n.heads : n.values * 2;
}

size_t CudaBackend::kv_block_bytes(int64_t block_size) const {
  const Impl& m = *impl_;
  return size_t(block_size) * kv_bytes_per_token(m.spec, m.range, m.opt.fp8_kv);
}

void CudaBackend::init_kv_cache(int64_t num_blocks, int64_t block_size) {
  init_windowed_kv_cache(num_blocks, num_blocks, block_size);
}

// One allocation: each layer's K and V (then, with FP8, their scales) for the blocks it
// holds, then the full-attention layers' KvLayer table the block copies read.
void CudaBackend::init_windowed_kv_cache(int64_t num_blocks, int64_t num_window_blocks, int64_t block_size) {
  Impl& m = *impl_;
  SPARK_CHECK(num_blocks > 0 && block_size > 0, "init_kv_cache: empty cache");
  SPARK_CHECK(num_window_blocks > 0 && num_window_blocks <= num_blocks, "init_kv_cache: window blocks out of range");
  if (block_size != m.opt.block_size)
    throw InputError("KV block size " + std::to_string(block_size) +
                     " differs from engine.block_size = " + std::to_string(m.opt.block_size));
  CUDA_CHECK(cudaSetDevice(m.opt.device));
  if (!m.cache.empty()) {  // a pipeline worker's next session may size its cache otherwise
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
    if (m.graphs) m.graphs = std::make_unique<cuda::DecodeGraphs>(graph_rows(m.opt));  // they hold the old cache
    CUDA_CHECK(cudaFree(m.kv_arena));
    m.kv_arena = nullptr;
    m.cache.clear();
  }
  m.num_blocks = num_blocks;
  m.window_blocks = num_blocks;  // a stage without sliding layers holds every block in each
  for (int64_t l = 0; l < m.range.last_layer - m.range.first_layer; ++l)
    if (m.sliding(size_t(l))) m.window_blocks = num_window_blocks;
  m.kv.dtype = kv_dtype(m.opt);
  m.kv.block_size = int32_t(block_size);
  m.kv.num_slots = num_blocks * block_size;
  const size_t layers = size_t(m.range.last_layer - m.range.first_layer);
  std::vector<int64_t> held(layers);
  // Gemma 4's assistant's layers read the model's K and V (attach_model): they hold none.
  for (size_t l = 0; l < layers; ++l)
    held[l] = !m.shapes[l].attends() || m.shapes[l].reads_model_kv ? 0 : m.sliding(l) ? m.window_blocks : num_blocks;
  // Each layer in its own geometry (Gemma 4's full layers: other kv heads, wider heads).
  auto value_bytes = [&](size_t l) {
    const size_t values = size_t(held[l] * block_size) * size_t(m.shapes[l].num_kv_heads * m.shapes[l].head_dim);
    return aligned(values * (m.opt.fp8_kv ? 1 : 2));
  };
  auto scale_bytes = [&](size_t l) {
    return m.opt.fp8_kv ? aligned(size_t(held[l] * block_size) * size_t(m.shapes[l].num_kv_heads)) : size_t(0);
  };
  size_t total = 0;
  for (size_t l = 0; l < layers; ++l) total += 2 * (value_bytes(l) + scale_bytes(l));
  const size_t table_offset = total;
  total += aligned(layers * sizeof(cuda::KvLayer));
  CUDA_CHECK(cudaMalloc(&m.kv_arena, total));
  // Zeroed so that a stale read (a bug) sees finite values, never NaN from fresh memory.
  CUDA_CHECK(cudaMemset(m.kv_arena, 0, total));
  char* p = static_cast<char*>(m.kv_arena);
  std::vector<cuda::KvLayer> full;
  for (size_t l = 0; l < layers; ++l) {
    const size_t values = value_bytes(l), scales = scale_bytes(l);
    cuda::KvLayer c;
    c.num_kv_heads = int32_t(m.shapes[l].num_kv_heads);
    c.head_dim = int32_t(m.shapes[l].head_dim);
    c.k = p;
    c.v = p + values;
    if (m.opt.fp8_kv) {
      c.k_scale = reinterpret_cast<uint8_t*>(p + 2 * values);
      c.v_scale = reinterpret_cast<uint8_t*>(p + 2 * values + scales);
    }
    c.num_blocks = held[l];
    m.cache.push_back(c);
    if (!m.sliding(l) && held[l] > 0) full.push_back(c);
    p += 2 * (values + scales);
  }
  auto* table = reinterpret_cast<cuda::KvLayer*>(static_cast<char*>(m.kv_arena) + table_offset);
  if (!full.empty())
    CUDA_CHECK(cudaMemcpy(table, full.data(), full.size() * sizeof(cuda::KvLayer), cudaMemcpyHostToDevice));
  m.full_layers = table;
  m.num_full_layers = int32_t(full.size());
  CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream zeroing and upload, unordered with the compute stream
}

// Not for an encoder (no decode steps) or Gemma 4's assistant (its layers read the model's
// cache, which a step sets up outside the graph).
void CudaBackend::warm_up() {
  Impl& m = *impl_;
  if (!m.graphs || m.spec.encoder || m.spec.is_assistant()) return;
  CUDA_CHECK(cudaSetDevice(m.opt.device));
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t bucket : m.graphs->buckets()) m.warm_graph(bucket);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  log_info("cuda: decode graphs for 1..", m.graphs->largest_bucket(), " rows (", m.graphs->buckets().size(),
           " sizes) captured in ", ms.count(), " ms");
}

// One allocation of every slot's states, zeroed (a sequence starting at position 0 ignores
// its slot's contents, delta_net.h, but a stale read must see finite values).
void CudaBackend::init_state_slots(int64_t num_slots) {
  Impl& m = *impl_;
  SPARK_CHECK(num_slots >= 0, "init_state_slots: a negative count");
  CUDA_CHECK(cudaSetDevice(m.opt.device));
  if (m.states) {  // a pipeline worker's next session
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
    if (m.graphs) m.graphs = std::make_unique<cuda::DecodeGraphs>(graph_rows(m.opt));  // they hold the old states
    CUDA_CHECK(cudaFree(m.states));
    m.states = nullptr;
  }
  m.num_state_slots = m.num_recurrent > 0 ? num_slots : 0;
  if (m.num_state_slots == 0) return;
  const size_t bytes = size_t(m.num_state_slots) * size_t(m.state_slot_values()) * 4;
  CUDA_CHECK(cudaMalloc(&m.states, bytes));
  CUDA_CHECK(cudaMemset(m.states, 0, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream zeroing, unordered with the compute stream
}

void CudaBackend::forward(const Batch& batch, const float* hidden_in, ForwardResult& out) {
  Impl& m = *impl_;
  out.logits.clear();
  out.hidden.clear();
  out.final_hidden.clear();
  if (batch.num_tokens() == 0) return;
  const int32_t R = m.run(batch, hidden_in);
  if (!m.has_head && !m.raw_rows) {
    out.hidden.resize(size_t(batch.num_tokens()) * size_t(m.spec.hidden_size));
    CUDA_CHECK(cudaMemcpyAsync(out.hidden.data(), m.act.x, out.hidden.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  } else if (R > 0) {
    out.logits.resize(size_t(R) * size_t(m.spec.vocab_size));
    CUDA_CHECK(
        cudaMemcpyAsync(out.logits.data(), m.act.logits, out.logits.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.copy_final_hidden(batch, out.final_hidden);
}

// decode_cost_rows_of() above: 16 rows when every linear layer is packed and no layer is
// MoE, else 8.
int64_t CudaBackend::rows_at_decode_cost() const { return impl_->decode_cost_rows; }

CudaStepCounts CudaBackend::step_counts() const { return impl_->counts; }

bool CudaBackend::samples_on_device() const { return impl_->has_head; }

DeviceHidden CudaBackend::forward_to_boundary(const Batch& batch) {
  Impl& m = *impl_;
  SPARK_CHECK(!m.has_head && m.act.boundary, "forward_to_boundary on a stage that holds the LM head");
  const size_t n = size_t(batch.num_tokens()) * size_t(m.spec.hidden_size);
  if (n > 0) {
    m.run(batch, nullptr);
    cuda::hidden_to_16bit(m.act.x, int64_t(n), static_cast<cuda::bf16*>(m.act.boundary), m.stream);
    CUDA_CHECK(cudaStreamSynchronize(m.stream));  // a link may read it from another stream
  }
  return DeviceHidden{m.act.boundary, n, true};
}

DeviceHidden CudaBackend::boundary_input(size_t tokens) {
  Impl& m = *impl_;
  SPARK_CHECK(!m.has_embedding && m.act.boundary, "boundary_input on a stage that holds the embedding");
  if (int64_t(tokens) > m.sizes.max_tokens)
    throw InputError(std::to_string(tokens) + " rows of hidden states exceed the " + std::to_string(m.sizes.max_tokens) +
                     " the CUDA backend was sized for");
  m.boundary_in = true;
  return DeviceHidden{m.act.boundary, tokens * size_t(m.spec.hidden_size), true};
}

void CudaBackend::forward_sample(const Batch& batch, const float* hidden_in, const std::vector<SampleRow>& rows,
                                 StepOutput& out) {
  Impl& m = *impl_;
  SPARK_CHECK(m.has_head, "forward_sample on a stage without the LM head");
  SPARK_CHECK(rows.size() == batch.logits_rows.size(), "one sample row per logits row");
  out.samples.clear();
  out.hidden.clear();
  if (batch.num_tokens() == 0) return;
  m.run(batch, hidden_in);
  if (rows.empty())
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
  else
    m.sampler->sample(m.act.logits, rows, out.samples, m.stream);
  m.copy_final_hidden(batch, out.hidden);
}

uint64_t CudaBackend::weight_bytes(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  return cuda::DeviceWeights::bytes(spec, range, stored);
}

uint64_t CudaBackend::weight_bytes_per_token(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  return cuda::DeviceWeights::bytes_per_token(spec, range, stored);
}

uint64_t CudaBackend::workspace_bytes(const ModelSpec& spec, const CudaOptions& options, LayerRange range) {
  const bool has_head = range.last_layer == spec.num_layers && !spec.encoder;
  Sizes z(spec, options, largest_bucket(options), range);
  uint64_t total = z.total() + cuda::Gemm::kWorkspaceBytes;
  for (const cuda::AttentionShape& a : attention_plan(layer_shapes(spec, range), options, z).shapes)
    total += cuda::Attention::workspace_bytes(a);
  if (has_head)
    total += cuda::DeviceSampler::workspace_bytes(spec.vocab_size, int32_t(z.max_rows), options.max_model_len);
  if (spec.num_centroids > 0) total += uint64_t(spec.vocab_size) * 4;  // each token's cluster
  return total;
}

}  // namespace spark
