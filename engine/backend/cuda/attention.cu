// attention.cu — the Attention class: workspace, per-step planning (decode rows vs prefill tiles) and kernel dispatch.
#include "engine/backend/cuda/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/cuda/attention_kernels.h"
#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Where each workspace array lives, derived from the shape alone so workspace_bytes()
// and the constructor agree.
struct Layout {
  int group = 0, head_chunks = 0, max_parts = 0, max_tiles = 0;
  int64_t part_rows = 0;  // most (decode slot, partition) pairs any launch writes
  size_t tiles = 0, decode = 0, part_m = 0, part_l = 0, part_acc = 0, total = 0;
  size_t pinned = 0;  // the prefix (tiles, decode list) mirrored in pinned host memory
};

Layout layout(const AttentionShape& s) {
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256 &&
      s.head_dim != 512)
    throw InputError("attention: head_dim " + std::to_string(s.head_dim) +
                     " is not supported by the CUDA backend (16, 32, 64, 128, 256 or 512)");
  if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0)
    throw InputError("attention: num_heads (" + std::to_string(s.num_heads) +
                     ") must be a positive multiple of num_kv_heads (" + std::to_string(s.num_kv_heads) + ")");
  if (!is_pow2(s.block_size) || s.block_size < 8)
    throw InputError("attention: block_size " + std::to_string(s.block_size) + " must be a power of two, at least 8");
  if (!attn::valid_kv_for(s.compute, s.kv_dtype)) {
    const char* kv = s.kv_dtype == KvDtype::F16 ? "F16" : "BF16";
    throw InputError(std::string("attention: a KV cache of ") + kv + " needs compute type " + kv +
                     " (an FP8 cache works with either)");
  }
  SPARK_CHECK(s.max_tokens > 0 && s.max_seqs > 0 && s.max_blocks_per_seq > 0, "attention: empty shape");
  SPARK_CHECK(s.scale > 0.0f, "attention: softmax scale must be positive");

  Layout l;
  l.group = s.num_heads / s.num_kv_heads;
  l.head_chunks = attn::decode_head_chunks(l.group, s.head_dim);
  const int64_t max_ctx = int64_t(s.max_blocks_per_seq) * s.block_size;
  l.max_parts =
      int(std::clamp<int64_t>((max_ctx + attn::kMinPartition - 1) / attn::kMinPartition, 1, attn::kMaxPartitions));
  // Every sequence adds at most one partial tile.
  const int tile_rows = attn::prefill_rows(s.head_dim);
  l.max_tiles = (s.max_tokens + tile_rows - 1) / tile_rows + s.max_seqs;
  SPARK_CHECK(l.max_tiles <= 65535, "attention: too many prefill tiles for one grid dimension");
  for (int n = 1; n <= s.max_seqs; ++n)
    l.part_rows = std::max<int64_t>(l.part_rows,
                                    int64_t(n) * attn::decode_parts_cap(n, s.num_kv_heads, l.head_chunks, l.max_parts));

  size_t off = 0;
  l.tiles = off;
  off += align_up(size_t(l.max_tiles) * sizeof(attn::PrefillTile));
  l.decode = off;
  off += align_up(size_t(s.max_seqs) * sizeof(int32_t));
  l.pinned = off;
  const size_t part_heads = size_t(l.part_rows) * size_t(s.num_heads);
  l.part_m = off;
  off += align_up(part_heads * sizeof(float));
  l.part_l = off;
  off += align_up(part_heads * sizeof(float));
  l.part_acc = off;
  off += align_up(part_heads * size_t(s.head_dim) * sizeof(float));
  l.total = off;
  return l;
}

}  // namespace

struct Attention::State {
  AttentionShape shape;
  Layout lay;
  int block_size_log2 = 0;
  float scale_log2 = 0;
  uint8_t* workspace = nullptr;  // device
  uint8_t* pinned = nullptr;     // host mirror of the plan arrays
  cudaEvent_t upload_done = nullptr;
  bool upload_pending = false;
  // The plan of the last prepare().
  bool prepared = false;
  bool decode_only = false;
  int num_seqs = 0, num_decode = 0, num_tiles = 0;

  attn::PrefillTile* tiles() const { return reinterpret_cast<attn::PrefillTile*>(workspace + lay.tiles); }
  int32_t* decode_list() const { return reinterpret_cast<int32_t*>(workspace + lay.decode); }
  float* part(size_t off) const { return reinterpret_cast<float*>(workspace + off); }

  ~State() {
    // Destructors must not throw: errors here are dropped.
    if (upload_done) cudaEventDestroy(upload_done);
    if (pinned) cudaFreeHost(pinned);
    if (workspace) cudaFree(workspace);
  }
};

size_t Attention::workspace_bytes(const AttentionShape& shape) { return layout(shape).total; }

Attention::Attention(const AttentionShape& shape) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.shape = shape;
  st.lay = layout(shape);
  while ((1 << st.block_size_log2) < shape.block_size) ++st.block_size_log2;
  st.scale_log2 = shape.scale * 1.4426950408889634f;
  attn::prefill_setup(shape.head_dim, shape.compute, shape.kv_dtype);
  CUDA_CHECK(cudaMalloc(&st.workspace, st.lay.total));
  CUDA_CHECK(cudaMallocHost(&st.pinned, st.lay.pinned));
  CUDA_CHECK(cudaEventCreateWithFlags(&st.upload_done, cudaEventDisableTiming));
}

Attention::~Attention() = default;

bool Attention::prepare(const Batch& batch, cudaStream_t stream) {
  State& st = *state_;
  const AttentionShape& sh = st.shape;
  const int S = batch.num_seqs(), T = batch.num_tokens();
  if (S > sh.max_seqs || T > sh.max_tokens)
    throw InputError("attention: a step of " + std::to_string(S) + " sequences and " + std::to_string(T) +
                     " rows exceeds the planned " + std::to_string(sh.max_seqs) + " and " +
                     std::to_string(sh.max_tokens));
  st.prepared = true;
  st.num_seqs = S;
  bool decode_only = true;
  for (int s = 0; s < S && decode_only; ++s)
    decode_only = batch.query_start[size_t(s) + 1] - batch.query_start[size_t(s)] == 1;
  st.decode_only = decode_only;
  if (decode_only) {
    // Nothing to upload: the kernels read the sequence list off the DeviceBatch, so a
    // graph captured for this step replays for any other decode-only step.
    st.num_decode = S;
    st.num_tiles = 0;
    return true;
  }

  // The previous step's copy may still be reading the pinned buffer.
  if (st.upload_pending) CUDA_CHECK(cudaEventSynchronize(st.upload_done));
  st.upload_pending = false;
  auto* h_tiles = reinterpret_cast<attn::PrefillTile*>(st.pinned + st.lay.tiles);
  auto* h_decode = reinterpret_cast<int32_t*>(st.pinned + st.lay.decode);
  std::vector<std::pair<int32_t, attn::PrefillTile>> tiles;  // (keys the tile's last row sees, tile)
  const int tile_rows = attn::prefill_rows(sh.head_dim);
  int nd = 0;
  for (int s = 0; s < S; ++s) {
    const int32_t n = batch.query_start[size_t(s) + 1] - batch.query_start[size_t(s)];
    const int32_t ctx = batch.context_lens[size_t(s)];
    if (n == 1) {
      h_decode[nd++] = s;
    } else if (n > 1) {
      if (ctx < n) throw InputError("attention: context_lens[" + std::to_string(s) + "] is shorter than its rows");
      for (int32_t r0 = 0; r0 < n; r0 += tile_rows)
        tiles.push_back({ctx - n + std::min(r0 + tile_rows, n), attn::PrefillTile{s, r0}});
    }
  }
  // Longest first, so the last wave is made of short tiles.
  std::stable_sort(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  SPARK_CHECK(int(tiles.size()) <= st.lay.max_tiles, "attention: prefill tile count exceeds the workspace");
  for (size_t i = 0; i < tiles.size(); ++i) h_tiles[i] = tiles[i].second;
  st.num_decode = nd;
  st.num_tiles = int(tiles.size());
  if (st.num_tiles > 0)
    CUDA_CHECK(cudaMemcpyAsync(st.tiles(), h_tiles, size_t(st.num_tiles) * sizeof(attn::PrefillTile),
                               cudaMemcpyHostToDevice, stream));
  if (nd > 0)
    CUDA_CHECK(
        cudaMemcpyAsync(st.decode_list(), h_decode, size_t(nd) * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  if (st.num_tiles > 0 || nd > 0) {
    CUDA_CHECK(cudaEventRecord(st.upload_done, stream));
    st.upload_pending = true;
  }
  return false;
}

void Attention::run(const DeviceBatch& batch, KvLayer cache, const void* q, void* out, cudaStream_t stream,
                    bool programmatic, const AttentionExtras& extras) {
  const State& st = *state_;
  const AttentionShape& sh = st.shape;
  SPARK_CHECK(st.prepared, "attention: run() before prepare()");
  SPARK_CHECK(batch.num_seqs <= sh.max_seqs && batch.num_tokens <= sh.max_tokens, "attention: batch exceeds the shape");
  SPARK_CHECK(extras.window >= 0, "attention: a negative sliding window");
  SPARK_CHECK(extras.causal || extras.window == 0, "attention: a sliding window needs causal attention");
  if (!st.decode_only) SPARK_CHECK(batch.num_seqs == st.num_seqs, "attention: run() on a batch prepare() did not plan");

  const auto step = [&](attn::StepParams& p) {
    p.q = q;
    p.out = out;
    p.cache = cache;
    p.query_start = batch.query_start;
    p.context_lens = batch.context_lens;
    p.block_tables = batch.block_tables;
    p.max_blocks_per_seq = batch.max_blocks_per_seq;
    p.num_heads = sh.num_heads;
    p.num_kv_heads = sh.num_kv_heads;
    p.head_dim = sh.head_dim;
    p.block_size_log2 = st.block_size_log2;
    p.scale_log2 = st.scale_log2;
    p.window = extras.window;
    p.sinks = extras.sinks;
    p.causal = extras.causal;
  };

  attn::DecodeParams d;
  step(d);
  // Decode-only steps read only the DeviceBatch (graph-safe); mixed steps use the list prepare() uploaded.
  d.seq_list = st.decode_only ? nullptr : st.decode_list();
  d.num_decode = st.decode_only ? batch.num_seqs : st.num_decode;
  d.head_chunks = st.lay.head_chunks;
  d.parts_cap = attn::decode_parts_cap(d.num_decode, sh.num_kv_heads, st.lay.head_chunks, st.lay.max_parts);
  SPARK_CHECK(int64_t(d.num_decode) * d.parts_cap <= st.lay.part_rows,
              "attention: split-K partials exceed the workspace");
  d.part_m = st.part(st.lay.part_m);
  d.part_l = st.part(st.lay.part_l);
  d.part_acc = st.part(st.lay.part_acc);
  attn::launch_decode(d, sh.compute, sh.kv_dtype, stream, programmatic);

  if (st.decode_only) return;
  attn::PrefillParams p;
  step(p);
  p.tiles = st.tiles();
  p.num_tiles = st.num_tiles;
  attn::launch_prefill(p, sh.compute, sh.kv_dtype, stream);
}

}  // namespace spark::cuda
