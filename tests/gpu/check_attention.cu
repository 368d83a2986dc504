// check_attention.cu — checks the CUDA attention kernels (prefill tiles, split-K decode,
// mixed steps, a replayed decode graph; BF16 and F16 compute with caches in the compute
// type or FP8; head_dim 16 to 512; gpt-oss's sliding windows and sink logits, with the
// blocks wholly before a window poisoned so that reading one shows; encoders' bidirectional
// rows) against cpu::attention on shuffled block tables, and times decode and prefill at
// the Llama-3.1-8B shape.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/attention.h"
#include "engine/backend/cuda/attention.h"
#include "engine/util/thread_pool.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::HalfType;
using cuda::KvDtype;
constexpr const char* kCheck = "attention";

ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

struct Seq {
  int rows;  // query rows this step
  int ctx;   // context length once they are written
};

struct Case {
  std::string name;
  int heads, kv_heads, head_dim;
  KvDtype dtype;
  int block_size;
  std::vector<Seq> seqs;
  HalfType compute = HalfType::BF16;  // q, out; the cache too unless FP8
  int window = 0;                     // gpt-oss: a sliding window (AttentionExtras)
  bool sinks = false;                 // gpt-oss: a sink logit a head
  bool causal = true;                 // false: encoders' bidirectional attention (AttentionExtras)
};

std::string dtype_name(KvDtype d, HalfType compute = HalfType::BF16) {
  if (d == KvDtype::FP8) return compute == HalfType::F16 ? "fp8 f16" : "fp8";
  return d == KvDtype::F16 ? "f16" : "bf16";
}

// q and out as the device holds them: raw 16-bit values of the compute type, so one
// buffer type serves both.
uint16_t half_bits(HalfType t, float v) {
  if (t == HalfType::F16) return __half_raw(__float2half(v)).x;
  return __nv_bfloat16_raw(__float2bfloat16(v)).x;
}

float half_value(HalfType t, uint16_t b) {
  if (t == HalfType::F16) {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(bf16(r));
}

std::vector<uint16_t> to_half_bits(HalfType t, const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = half_bits(t, v[i]);
  return r;
}

std::vector<float> from_half_bits(HalfType t, const std::vector<uint16_t>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = half_value(t, v[i]);
  return r;
}

// Values as the device sees them after rounding to t (the CPU reference gets the same inputs).
std::vector<float> round_to(HalfType t, const std::vector<float>& v) { return from_half_bits(t, to_half_bits(t, v)); }

// The batch of `seqs` over shuffled, non-contiguous blocks (a few blocks stay unused).
struct HostBatch {
  Batch batch;
  int64_t num_blocks = 0;
};

HostBatch make_batch(const std::vector<Seq>& seqs, int bs, uint64_t seed) {
  HostBatch hb;
  Batch& b = hb.batch;
  int64_t need = 0;
  int max_ctx = 1;
  for (const Seq& s : seqs) {
    need += (s.ctx + bs - 1) / bs;
    max_ctx = std::max(max_ctx, s.ctx);
  }
  hb.num_blocks = need + 7;
  std::vector<int32_t> ids(size_t(hb.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int mb = (max_ctx + bs - 1) / bs;
  b.max_blocks_per_seq = mb;
  b.block_tables.assign(seqs.size() * size_t(mb), 0);
  b.query_start.push_back(0);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Seq& q = seqs[s];
    int32_t* table = b.block_tables.data() + s * size_t(mb);
    for (int k = 0; k < (q.ctx + bs - 1) / bs; ++k) table[k] = ids[next++];
    for (int i = 0; i < q.rows; ++i) {
      const int pos = q.ctx - q.rows + i;
      b.token_ids.push_back(1);
      b.positions.push_back(std::max(pos, 0));
      b.slot_mapping.push_back(pos < 0 ? -1 : table[pos / bs] * bs + pos % bs);  // -1: graph padding
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(q.ctx);
  }
  return hb;
}

// The batch's arrays on the device, and the DeviceBatch that points at them.
struct DevBatch {
  DeviceArray<int32_t> token_ids, positions, slot_mapping, query_start, context_lens, block_tables;
  cuda::DeviceBatch db;
  explicit DevBatch(const Batch& b)
      : token_ids(b.token_ids),
        positions(b.positions),
        slot_mapping(b.slot_mapping),
        query_start(b.query_start),
        context_lens(b.context_lens),
        block_tables(b.block_tables) {
    db.token_ids = token_ids.get();
    db.positions = positions.get();
    db.slot_mapping = slot_mapping.get();
    db.query_start = query_start.get();
    db.context_lens = context_lens.get();
    db.block_tables = block_tables.get();
    db.max_blocks_per_seq = b.max_blocks_per_seq;
    db.num_tokens = b.num_tokens();
    db.num_seqs = b.num_seqs();
  }
};

// Host FP8 e4m3 encoding with the rule of fp8_scale_for in common.cuh.
uint8_t fp8_scale_byte(float amax) {
  if (!(amax > 0.0f)) return 127;
  int e = 0;
  std::frexp(amax / cuda::kFp8E4m3Max, &e);
  e = std::max(-126, std::min(127, e));
  return uint8_t(e + 127);
}
float fp8_to_float(uint8_t q) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3))); }

// One layer's cache in both forms: the CPU reference (f32 values exactly as the GPU
// decodes them) and the GPU bytes. With FP8, `exact` holds the unquantized values.
struct Caches {
  cpu::KvGeometry g;
  cpu::LayerKv ref, exact;
  DeviceArray<uint8_t> k, v, k_scale, v_scale;
  bool fp8 = false;
  cuda::KvLayer layer() const {
    return {k.get(), v.get(), fp8 ? k_scale.get() : nullptr, fp8 ? v_scale.get() : nullptr};
  }
};

void fill_cache(Caches& c, KvDtype dtype, uint64_t seed) {
  const int64_t rows = c.g.slots() * c.g.kv_heads, D = c.g.head_dim;
  const size_t n = size_t(rows * D);
  c.ref.k.allocate(n);
  c.ref.v.allocate(n);
  if (dtype == KvDtype::FP8) {
    c.exact.k.allocate(n);
    c.exact.v.allocate(n);
  }
  const size_t elem = dtype == KvDtype::FP8 ? 1 : 2;
  std::vector<uint8_t> hk(n * elem), hv(n * elem), hks(dtype == KvDtype::FP8 ? size_t(rows) : 1),
      hvs(dtype == KvDtype::FP8 ? size_t(rows) : 1);
  const float scale_spread[4] = {1.0f, 0.25f, 4.0f, 1.0f};  // per-row magnitudes vary, so scales differ
  pool().parallel_for(rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int which = 0; which < 2; ++which) {
        const std::vector<float> x = random_floats(size_t(D), seed * 1000003ull + uint64_t(r) * 2 + uint64_t(which));
        const float mag = scale_spread[(r * 7 + which) % 4];
        float* ref = (which ? c.ref.v.data() : c.ref.k.data()) + r * D;
        uint8_t* bytes = (which ? hv.data() : hk.data()) + size_t(r * D) * elem;
        if (dtype != KvDtype::FP8) {
          const HalfType t = dtype == KvDtype::F16 ? HalfType::F16 : HalfType::BF16;
          for (int64_t i = 0; i < D; ++i) {
            const uint16_t h = half_bits(t, x[size_t(i)] * mag);
            ref[i] = half_value(t, h);
            std::memcpy(bytes + i * 2, &h, 2);
          }
        } else {
          float* exact = (which ? c.exact.v.data() : c.exact.k.data()) + r * D;
          float amax = 0.0f;
          for (int64_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(x[size_t(i)] * mag));
          const uint8_t sb = fp8_scale_byte(amax);
          (which ? hvs : hks)[size_t(r)] = sb;
          const float scale = std::ldexp(1.0f, int(sb) - 127), inv = 1.0f / scale;
          for (int64_t i = 0; i < D; ++i) {
            exact[i] = x[size_t(i)] * mag;
            const uint8_t q = __nv_cvt_float_to_fp8(exact[i] * inv, __NV_SATFINITE, __NV_E4M3);
            bytes[i] = q;
            ref[i] = fp8_to_float(q) * scale;
          }
        }
      }
    }
  });
  c.k = DeviceArray<uint8_t>(hk);
  c.v = DeviceArray<uint8_t>(hv);
  c.k_scale = DeviceArray<uint8_t>(hks);
  c.v_scale = DeviceArray<uint8_t>(hvs);
  c.fp8 = dtype == KvDtype::FP8;
}

cuda::AttentionShape shape_for(const Case& c, const Batch& b) {
  cuda::AttentionShape s;
  s.num_heads = c.heads;
  s.num_kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.block_size = c.block_size;
  s.compute = c.compute;
  s.kv_dtype = c.dtype;
  s.max_tokens = std::max(b.num_tokens(), 1);
  s.max_seqs = std::max(b.num_seqs(), 1);
  s.max_blocks_per_seq = b.max_blocks_per_seq;
  s.scale = 1.0f / std::sqrt(float(c.head_dim));
  return s;
}

std::vector<float> cpu_attention(const Case& c, const HostBatch& hb, const cpu::KvGeometry& g,
                                 const std::vector<float>& q, const cpu::LayerKv& kv,
                                 const cpu::AttentionExtras& extras = {}) {
  std::vector<float> out(q.size());
  cpu::attention(pool(), hb.batch, g, c.heads, q.data(), kv, out.data(), extras);
  return out;
}

// Points every block-table entry wholly before the window of its sequence's first row at
// one extra block (returned), whose K and V poison_block fills with NaN: a kernel that
// reads any of them turns its output NaN. *hidden: how many entries.
int32_t hide_blocks_before_window(HostBatch& hb, int window, int bs, int* hidden) {
  Batch& b = hb.batch;
  const int32_t poison = int32_t(hb.num_blocks++);
  *hidden = 0;
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int rows = b.query_start[size_t(s) + 1] - b.query_start[size_t(s)];
    const int first_visible = b.context_lens[size_t(s)] - rows + 1;
    const int start = first_visible > window ? first_visible - window : 0;
    for (int k = 0; k < start / bs; ++k, ++*hidden) b.block_tables[size_t(s) * b.max_blocks_per_seq + size_t(k)] = poison;
  }
  return poison;
}

void poison_block(Caches& c, int32_t block) {
  const int64_t floats = int64_t(c.g.block_size) * c.g.kv_heads * c.g.head_dim;
  const size_t elem = c.fp8 ? 1 : 2;
  for (cpu::LayerKv* kv : {&c.ref, &c.exact})
    for (cpu::KvBuffer* buf : {&kv->k, &kv->v})
      if (buf->data()) std::fill_n(buf->data() + block * floats, floats, NAN);
  for (DeviceArray<uint8_t>* a : {&c.k, &c.v})
    CUDA_CHECK(cudaMemset(a->get() + size_t(block * floats) * elem, 0xFF, size_t(floats) * elem));
}

void check_case(const Case& c, uint64_t seed) {
  HostBatch hb = make_batch(c.seqs, c.block_size, seed);
  int hidden = 0;
  const int32_t poison = c.window > 0 ? hide_blocks_before_window(hb, c.window, c.block_size, &hidden) : -1;
  const Batch& b = hb.batch;
  Caches caches;
  caches.g = {hb.num_blocks, c.block_size, c.kv_heads, c.head_dim};
  fill_cache(caches, c.dtype, seed + 1);
  if (poison >= 0) poison_block(caches, poison);
  const std::vector<float> sinks = random_floats(size_t(c.heads), seed + 3, -3.0f, 3.0f);
  DeviceArray<float> d_sinks(sinks);
  const cpu::AttentionExtras extras{c.window, c.sinks ? sinks.data() : nullptr, c.causal};
  const size_t qn = size_t(b.num_tokens()) * size_t(c.heads) * size_t(c.head_dim);
  const std::vector<float> q = round_to(c.compute, random_floats(qn, seed + 2, -3.0f, 3.0f));
  DeviceArray<uint16_t> d_q(to_half_bits(c.compute, q)), d_out(qn);
  DevBatch dev(b);

  cuda::Attention attn(shape_for(c, b));
  bool expect_decode = true;
  for (const Seq& s : c.seqs) expect_decode = expect_decode && s.rows == 1;
  d_out.poison();
  const bool decode_only = attn.prepare(b, nullptr);
  attn.run(dev.db, caches.layer(), d_q.get(), d_out.get(), nullptr, false,
           {c.window, c.sinks ? d_sinks.get() : nullptr, c.causal});
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::string what = c.name + " " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " d" +
                           std::to_string(c.head_dim) + " " + dtype_name(c.dtype, c.compute) +
                           (c.window > 0 ? " window " + std::to_string(c.window) + " (" + std::to_string(hidden) +
                                               " blocks before it poisoned)"
                                         : "") +
                           (c.sinks ? " sinks" : "") + (c.causal ? "" : " bidirectional");
  if (decode_only != expect_decode) row(kCheck, what, "prepare() misjudged decode-only", "-", false);
  const std::vector<float> got = from_half_bits(c.compute, d_out.download());
  error_row(kCheck, what, rel_error(cpu_attention(c, hb, caches.g, q, caches.ref, extras), got),
            half_limit(c.compute));
  if (c.dtype == KvDtype::FP8)
    info(kCheck, what + " vs unquantized",
         fmt("rel err %.2e", rel_error(cpu_attention(c, hb, caches.g, q, caches.exact, extras), got)), "fp8 rounding");
}

// A BF16 cache with F16 compute (or F16 with BF16) is a planning bug: the constructor says so.
void check_rejects_mismatch() {
  for (const auto& [compute, kv] : {std::pair{HalfType::F16, KvDtype::BF16}, std::pair{HalfType::BF16, KvDtype::F16}}) {
    Case c{"", 4, 2, 64, kv, 16, {{1, 10}}, compute};
    const HostBatch hb = make_batch(c.seqs, c.block_size, 1);
    bool threw = false;
    try {
      cuda::Attention attn(shape_for(c, hb.batch));
    } catch (const InputError&) {
      threw = true;
    }
    row(kCheck, "rejects " + dtype_name(kv) + " cache with " + (compute == HalfType::F16 ? "f16" : "bf16") + " compute",
        threw ? "InputError" : "accepted", "InputError", threw);
  }
}

// A graph captured on one decode-only step must replay correctly on another with the
// same number of sequences: new contexts, block tables and q in the same buffers.
void check_graph_replay() {
  Case c{"decode graph replay", 32, 8, 128, KvDtype::BF16, 16, {}};
  std::vector<Seq> first, second;
  for (int i = 0; i < 8; ++i) {
    first.push_back({1, 100 + 301 * i});
    second.push_back({1, i == 3 ? 0 : 2500 - 277 * i});  // one padding sequence
  }
  const HostBatch ha = make_batch(first, c.block_size, 71), hb2 = make_batch(second, c.block_size, 72);
  // One cache big enough for both tables.
  Caches caches;
  caches.g = {std::max(ha.num_blocks, hb2.num_blocks), c.block_size, c.kv_heads, c.head_dim};
  fill_cache(caches, c.dtype, 73);
  Batch a = ha.batch, b = hb2.batch;
  const int mb = std::max(a.max_blocks_per_seq, b.max_blocks_per_seq);
  auto restride = [mb](Batch& x) {
    std::vector<int32_t> t(size_t(x.num_seqs()) * size_t(mb), 0);
    for (int s = 0; s < x.num_seqs(); ++s)
      std::copy_n(x.block_tables.begin() + int64_t(s) * x.max_blocks_per_seq, x.max_blocks_per_seq,
                  t.begin() + int64_t(s) * mb);
    x.block_tables = t;
    x.max_blocks_per_seq = mb;
  };
  restride(a);
  restride(b);
  const size_t qn = size_t(8) * size_t(c.heads) * size_t(c.head_dim);
  const std::vector<float> qa = round_half<bf16>(random_floats(qn, 74, -3.0f, 3.0f));
  const std::vector<float> qb = round_half<bf16>(random_floats(qn, 75, -3.0f, 3.0f));
  DeviceArray<bf16> d_q(to_half<bf16>(qa)), d_out(qn);
  DevBatch dev(a);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::Attention attn(shape_for(c, a));
  const bool safe = attn.prepare(a, stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  attn.run(dev.db, caches.layer(), d_q.get(), d_out.get(), stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Step b: same buffers, new contents.
  dev.context_lens.upload(b.context_lens);
  dev.block_tables.upload(b.block_tables);
  dev.query_start.upload(b.query_start);
  d_q.upload(to_half<bf16>(qb));
  d_out.poison();
  CUDA_CHECK(cudaDeviceSynchronize());  // the stream does not wait on the legacy default stream
  const bool safe_b = attn.prepare(b, stream);
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  HostBatch hbb{b, caches.g.num_blocks};
  const double err = rel_error(cpu_attention(c, hbb, caches.g, qb, caches.ref), from_half(d_out.download()));
  if (!safe || !safe_b) row(kCheck, c.name, "prepare() said not graph-safe", "-", false);
  error_row(kCheck, c.name + " 32/8 d128 bf16 (8 seqs, 1 padding)", err, kBf16Limit);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// ---- benchmarks ------------------------------------------------------------------------

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#if SPARK_CUDA_EMU
// Bytes one decode launch reads on shape H/KVH heads of D with a BF16 cache in blocks of 16
// (the emulator counts each __ldg sector once), for one query row of each of `seqs`, and the
// K and V bytes the tokens each row sees (its window's with window > 0) hold.
struct DecodeReads {
  double reads, kv_bytes;
};
DecodeReads decode_reads(int H, int KVH, int D, const std::vector<Seq>& seqs, int window, bool sinks, uint64_t seed) {
  const int bs = 16;
  const HostBatch hb = make_batch(seqs, bs, seed);
  Caches caches;
  caches.g = {hb.num_blocks, bs, KVH, D};
  fill_cache(caches, KvDtype::BF16, seed + 1);
  const std::vector<float> q = random_floats(seqs.size() * H * D, seed + 2, -3.0f, 3.0f);
  DeviceArray<uint16_t> d_q(to_half_bits(HalfType::BF16, q)), d_out(q.size());
  DeviceArray<float> d_sinks(random_floats(size_t(H), seed + 3, -3.0f, 3.0f));
  DevBatch dev(hb.batch);
  Case c{"", H, KVH, D, KvDtype::BF16, bs, seqs};
  cuda::Attention attn(shape_for(c, hb.batch));
  attn.prepare(hb.batch, nullptr);
  double kv_tokens = 0;
  for (const Seq& s : seqs) kv_tokens += window > 0 ? std::min(s.ctx, window) : s.ctx;
  ::emu::global_reads_begin();
  attn.run(dev.db, caches.layer(), d_q.get(), d_out.get(), nullptr, false, {window, sinks ? d_sinks.get() : nullptr});
  CUDA_CHECK(cudaDeviceSynchronize());
  return {double(::emu::global_reads_end().total()), kv_tokens * KVH * D * 2 * 2};
}

// Bytes a decode step reads (the emulator counts each __ldg sector once) on gpt-oss-20b's
// attention shape, 64/8 heads of 64 with a BF16 cache in blocks of 16, for 4 sequences of
// 4096, 1000, 130 and 77 tokens: with its 128-token window, the K and V of the window's
// tokens only, 128 x 8 x 64 x 2 x 2 = 256 KiB a long sequence, against every token's
// (8 MiB at 4096) without one. The K and V are >= 99% of a step's reads (q is 8 KiB a
// sequence, a sink 4 bytes a head), so the ratio to them alone is held to 1 .. 1.05.
void bytes_sliding_decode() {
  const std::vector<Seq> seqs = {{1, 4096}, {1, 1000}, {1, 130}, {1, 77}};
  double full_reads = 0;
  for (int window : {0, 128}) {
    const DecodeReads r = decode_reads(64, 8, 64, seqs, window, true, 95);
    const double ratio = r.reads / r.kv_bytes;
    row(kCheck,
        std::string("bytes gpt-oss-20b decode b4 ctx 4096/1000/130/77 ") +
            (window > 0 ? "window " + std::to_string(window) : "full attention") + ", sinks",
        fmt("%.4f", ratio) + fmt(" (%.0f KiB read)", r.reads / 1024),
        fmt("1 .. 1.05 of %.0f KiB K/V", r.kv_bytes / 1024), ratio >= 1.0 && ratio <= 1.05);
    if (window == 0) full_reads = r.reads;
    else info(kCheck, "bytes gpt-oss-20b decode: full attention / window " + std::to_string(window),
              fmt("%.1fx", full_reads / r.reads), "what the window saves a sliding layer");
  }
}

// The same on Gemma-4-31B's full layers: 32/4 heads of 512 with a BF16 cache, a GQA group of
// 8 taken by two CTAs of 4 heads each. Both read the same K and V (the second from L2 on
// a GPU; the emulator counts a sector once a launch), so a step still reads the K and V
// once: 4 sequences of 2048, 700, 130 and 77 tokens, 4 x 512 x 2 x 2 = 8 KiB a token.
void bytes_wide_head_decode() {
  const DecodeReads r = decode_reads(32, 4, 512, {{1, 2048}, {1, 700}, {1, 130}, {1, 77}}, 0, false, 91);
  const double ratio = r.reads / r.kv_bytes;
  row(kCheck, "bytes Gemma-4-31B full-layer decode b4 ctx 2048/700/130/77, 512-wide heads, 2 head chunks",
      fmt("%.4f", ratio), fmt("1 .. 1.05 of %.0f KiB K/V", r.kv_bytes / 1024), ratio >= 1.0 && ratio <= 1.05);
}
#endif

// Random cache contents made on the device (the benchmark caches are gigabytes).
__global__ void fill_random(uint8_t* p, size_t n_values, KvDtype dtype, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_values; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(mix64(seed ^ (i * 0x9E3779B97F4A7C15ull)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (dtype == KvDtype::FP8)
      p[i] = __nv_cvt_float_to_fp8(u * 400.0f, __NV_SATFINITE, __NV_E4M3);
    else if (dtype == KvDtype::F16)
      reinterpret_cast<__half*>(p)[i] = __float2half(u);
    else
      reinterpret_cast<bf16*>(p)[i] = __float2bfloat16(u);
  }
}

void fill_device(DeviceArray<uint8_t>& a, size_t n_values, KvDtype dtype, uint64_t seed) {
  fill_random<<<1024, 256>>>(a.get(), n_values, dtype, seed);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());  // the timed stream is non-blocking
}

// Llama-3.1-8B: 32 q heads, 8 kv heads, head_dim 128, block 16. 64 sequences of `ctx`
// tokens; batch 1 rotates through them, so every run reads K/V that are not in L2.
void bench_decode(int ctx, KvDtype dtype, HalfType compute = HalfType::BF16) {
  const int S = 64, H = 32, KVH = 8, D = 128, bs = 16;
  std::vector<Seq> seqs(size_t(S), Seq{1, ctx});
  const HostBatch hb = make_batch(seqs, bs, 91);
  const Batch& b = hb.batch;
  const size_t values = size_t(hb.num_blocks) * bs * KVH * D;
  const bool fp8 = dtype == KvDtype::FP8;
  DeviceArray<uint8_t> k(values * (fp8 ? 1 : 2)), v(values * (fp8 ? 1 : 2));
  DeviceArray<uint8_t> ks(fp8 ? values / D : 1), vs(fp8 ? values / D : 1);
  fill_device(k, values, dtype, 1);
  fill_device(v, values, dtype, 2);
  if (fp8) {
    CUDA_CHECK(cudaMemset(ks.get(), 119, ks.size()));  // 2^-8: values of about +-1.5
    CUDA_CHECK(cudaMemset(vs.get(), 119, vs.size()));
  }
  const cuda::KvLayer layer{k.get(), v.get(), fp8 ? ks.get() : nullptr, fp8 ? vs.get() : nullptr};
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> q = random_floats(size_t(S) * H * D, 92, -3.0f, 3.0f);
  DeviceArray<uint16_t> d_q(to_half_bits(compute, q)), d_out(size_t(S) * H * D);
  DevBatch dev(b);
  Case c{"", H, KVH, D, dtype, bs, seqs, compute};
  cuda::Attention attn(shape_for(c, b));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double kv_bytes_per_seq = double(ctx) * KVH * D * 2 * (fp8 ? 1.0 + 1.0 / D : 2.0);

  // Batch 1: sequence i of the 64, in turn.
  Batch one;
  one.token_ids = {1};
  one.positions = {ctx - 1};
  one.slot_mapping = {b.slot_mapping[0]};
  one.query_start = {0, 1};
  one.context_lens = {ctx};
  one.block_tables.assign(b.block_tables.begin(), b.block_tables.begin() + b.max_blocks_per_seq);
  one.max_blocks_per_seq = b.max_blocks_per_seq;
  attn.prepare(one, stream);
  int turn = 0;
  const double ms1 = time_ms(
      [&] {
        cuda::DeviceBatch db = dev.db;
        const int i = turn++ % S;
        db.num_seqs = 1;
        db.num_tokens = 1;
        db.query_start = dev.query_start.get();  // [0, 1]
        db.context_lens = dev.context_lens.get() + i;
        db.block_tables = dev.block_tables.get() + int64_t(i) * b.max_blocks_per_seq;
        attn.run(db, layer, d_q.get() + int64_t(i) * H * D, d_out.get(), stream);
      },
      stream, 200, 20);
  const std::string tag = "decode " + dtype_name(dtype, compute) + " 32/8 d128 ctx " + std::to_string(ctx);
  info(kCheck, tag + " b1", fmt("%.1f us", ms1 * 1e3), fmt("%.0f GB/s K/V", kv_bytes_per_seq / (ms1 * 1e-3) / 1e9));

  attn.prepare(b, stream);
  const double ms64 = time_ms([&] { attn.run(dev.db, layer, d_q.get(), d_out.get(), stream); }, stream, 100, 10);
  info(kCheck, tag + " b64", fmt("%.1f us", ms64 * 1e3),
       fmt("%.0f GB/s K/V", S * kv_bytes_per_seq / (ms64 * 1e-3) / 1e9));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

void bench_prefill(int T, KvDtype dtype, HalfType compute = HalfType::BF16) {
  const int H = 32, KVH = 8, D = 128, bs = 16;
  const std::vector<Seq> seqs = {{T, T}};
  const HostBatch hb = make_batch(seqs, bs, 93);
  const size_t values = size_t(hb.num_blocks) * bs * KVH * D;
  const bool fp8 = dtype == KvDtype::FP8;
  DeviceArray<uint8_t> k(values * (fp8 ? 1 : 2)), v(values * (fp8 ? 1 : 2));
  DeviceArray<uint8_t> ks(fp8 ? values / D : 1), vs(fp8 ? values / D : 1);
  fill_device(k, values, dtype, 3);
  fill_device(v, values, dtype, 4);
  if (fp8) {
    CUDA_CHECK(cudaMemset(ks.get(), 119, ks.size()));
    CUDA_CHECK(cudaMemset(vs.get(), 119, vs.size()));
  }
  const cuda::KvLayer layer{k.get(), v.get(), fp8 ? ks.get() : nullptr, fp8 ? vs.get() : nullptr};
  CUDA_CHECK(cudaDeviceSynchronize());
  DeviceArray<uint16_t> d_q(to_half_bits(compute, random_floats(size_t(T) * H * D, 94, -3.0f, 3.0f))),
      d_out(size_t(T) * H * D);
  DevBatch dev(hb.batch);
  Case c{"", H, KVH, D, dtype, bs, seqs, compute};
  cuda::Attention attn(shape_for(c, hb.batch));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  attn.prepare(hb.batch, stream);
  const double ms = time_ms([&] { attn.run(dev.db, layer, d_q.get(), d_out.get(), stream); }, stream, 30, 5);
  const double flops = 4.0 * H * D * (double(T) * (T + 1) / 2);
  info(kCheck, "prefill " + dtype_name(dtype, compute) + " 32/8 d128 T=" + std::to_string(T), fmt("%.3f ms", ms),
       fmt("%.1f TFLOP/s", flops / (ms * 1e-3) / 1e12));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

void run_all() {
  // Decode-only steps.
  // Emulated, the b64 step costs by the sum of its contexts (~30 s of the 32/8 d128 ones
  // each): there the others stay within 1..1024, which keeps the batch's 4 partitions per
  // sequence (parts_cap comes from the 64 x 8 CTAs, not the lengths), ctx 1 and a 4096
  // cut in four 1024-token partitions, at a quarter of the tokens.
  const int b64_ctx_spread = emulated() ? 1024 : 4096;
  std::vector<Seq> b64;
  std::mt19937 rng(5);
  for (int i = 0; i < 64; ++i) b64.push_back({1, i == 0 ? 4096 : i == 1 ? 1 : int(rng() % b64_ctx_spread) + 1});
  std::vector<Seq> pad8;
  for (int i = 0; i < 8; ++i) pad8.push_back({1, i == 5 ? 0 : 37 + 611 * i});  // one padding sequence (ctx 0)
  // Mixed steps: prefill chunks with cached prefixes, decode rows, a sequence with no rows.
  const std::vector<Seq> mixed_a = {{300, 1000}, {1, 77}, {64, 64}, {1, 4096}, {17, 2000},
                                    {129, 162},  {1, 1},  {2, 2},   {0, 50},   {65, 700}};
  const std::vector<Seq> mixed_b = {{1, 513}, {200, 1500}, {1, 4000}, {63, 63}, {100, 101}, {1, 17}, {3, 1234}};
  // The 32/8 d128 shapes cost the emulator ~12 s a case, nearly all in the 200-row chunk's
  // 1300 cached tokens: emulated, that prefix is 400 (still several 64-token K/V tiles
  // before the chunk, and the chunk's 200 rows still four query tiles with a tail).
  const std::vector<Seq> mixed_b_d128 =
      emulated() ? std::vector<Seq>{{1, 513}, {200, 600}, {1, 4000}, {63, 63}, {100, 101}, {1, 17}, {3, 1234}}
                 : mixed_b;
  // Likewise the 32/8 d128 prefill cases (~13 s each at T=1000): T=300 keeps five query
  // tiles (a 44-row tail) and five K/V tiles (the same tail) of the same instantiations.
  const std::string big_prefill = emulated() ? "prefill T=300" : "prefill T=1000";
  const int big_t = emulated() ? 300 : 1000;
  const std::vector<Case> cases = {
      {"decode b1 ctx 1", 32, 8, 128, KvDtype::BF16, 16, {{1, 1}}},
      {"decode b1 ctx 4096", 32, 8, 128, KvDtype::BF16, 16, {{1, 4096}}},
      {"decode b1 ctx 1000", 32, 8, 128, KvDtype::BF16, 16, {{1, 1000}}},
      {"decode b64 ctx 1..4096", 32, 8, 128, KvDtype::BF16, 16, b64},
      {"decode b64 ctx 1..4096", 32, 8, 128, KvDtype::FP8, 16, b64},
      {"decode b8 +pad", 14, 2, 64, KvDtype::BF16, 16, pad8},
      {"decode b8 +pad", 14, 2, 64, KvDtype::FP8, 8, pad8},
      {"decode b8 +pad", 8, 8, 128, KvDtype::BF16, 32, pad8},
      {"decode b8 +pad", 8, 8, 256, KvDtype::BF16, 16, pad8},
      {"decode b8 +pad", 64, 4, 128, KvDtype::BF16, 16, pad8},  // group 16: two head chunks
      // Prefill.
      {"prefill T=2048", 32, 8, 128, KvDtype::BF16, 16, {{2048, 2048}}},
      {big_prefill, 32, 8, 128, KvDtype::FP8, 16, {{big_t, big_t}}},
      {"prefill T=333", 14, 2, 64, KvDtype::BF16, 16, {{333, 333}}},
      // Mixed: prefill chunks with cached prefixes, decode rows, a sequence with no rows.
      {"mixed",
       14,
       2,
       64,
       KvDtype::BF16,
       16,
       {{300, 1000}, {1, 77}, {64, 64}, {1, 4096}, {17, 2000}, {129, 162}, {1, 1}, {2, 2}, {0, 50}, {65, 700}}},
      {"mixed", 32, 8, 128, KvDtype::BF16, 16, mixed_b_d128},
      {"mixed", 32, 8, 128, KvDtype::FP8, 16, mixed_b_d128},
      {"mixed", 8, 8, 128, KvDtype::BF16, 8, {{130, 900}, {1, 2049}, {64, 128}, {1, 3}}},
      {"mixed", 14, 2, 64, KvDtype::FP8, 32, {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}}},
      {"mixed", 16, 8, 256, KvDtype::BF16, 16, {{150, 600}, {1, 999}, {70, 70}}},
      // Head sizes of the tiny fixture models (tests/golden/models: 4 q heads, 2 kv heads,
      // head_dim 16 or 32): narrow shared rows (2 and 4 chunks) in prefill, 2 and 4 lanes
      // per cache row in decode.
      {"decode b1 ctx 4096", 4, 2, 16, KvDtype::BF16, 16, {{1, 4096}}},
      {"decode b8 +pad", 4, 2, 16, KvDtype::BF16, 16, pad8},
      {"decode b8 +pad", 4, 2, 16, KvDtype::FP8, 8, pad8},
      {"decode b8 +pad", 4, 2, 32, KvDtype::BF16, 16, pad8},
      {"decode b8 +pad", 4, 2, 32, KvDtype::FP8, 16, pad8},
      // Groups wider than the lanes of a row (4 > 2, 8 > 4, 16 in two chunks of 8): a
      // lane writes the logits of several heads.
      {"decode b8 +pad", 8, 2, 16, KvDtype::BF16, 16, pad8},
      {"decode b8 +pad", 16, 2, 32, KvDtype::FP8, 16, pad8},
      {"decode b8 +pad", 32, 2, 16, KvDtype::BF16, 32, pad8},
      {"prefill T=333", 4, 2, 16, KvDtype::BF16, 16, {{333, 333}}},
      {"prefill T=333", 4, 2, 16, KvDtype::FP8, 16, {{333, 333}}},
      {"prefill T=1000", 4, 2, 32, KvDtype::BF16, 16, {{1000, 1000}}},
      {"prefill T=200", 4, 2, 32, KvDtype::FP8, 8, {{200, 200}}},
      {"mixed",
       4,
       2,
       16,
       KvDtype::BF16,
       16,
       {{300, 1000}, {1, 77}, {64, 64}, {1, 4096}, {17, 2000}, {129, 162}, {1, 1}, {2, 2}, {0, 50}, {65, 700}}},
      {"mixed", 4, 2, 16, KvDtype::FP8, 8, {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}, {3, 3}}},
      {"mixed",
       4,
       2,
       32,
       KvDtype::BF16,
       16,
       {{1, 513}, {200, 1500}, {1, 4000}, {63, 63}, {100, 101}, {1, 17}, {3, 1234}}},
      {"mixed",
       4,
       2,
       32,
       KvDtype::FP8,
       32,
       {{1, 513}, {200, 1500}, {1, 4000}, {63, 63}, {100, 101}, {1, 17}, {3, 1234}}},
      // F16 compute (FP16 and converted checkpoints): q, out and the prefill's tensor-core
      // inputs in f16, the cache in f16 or FP8 widened to f16.
      {"decode b64 ctx 1..4096", 32, 8, 128, KvDtype::F16, 16, b64, HalfType::F16},
      {"decode b64 ctx 1..4096", 32, 8, 128, KvDtype::FP8, 16, b64, HalfType::F16},
      {"decode b8 +pad", 14, 2, 64, KvDtype::F16, 16, pad8, HalfType::F16},
      {"decode b8 +pad", 14, 2, 64, KvDtype::FP8, 8, pad8, HalfType::F16},
      {"decode b8 +pad", 8, 8, 256, KvDtype::F16, 16, pad8, HalfType::F16},
      {"decode b8 +pad", 64, 4, 128, KvDtype::F16, 16, pad8, HalfType::F16},
      {big_prefill, 32, 8, 128, KvDtype::F16, 16, {{big_t, big_t}}, HalfType::F16},
      {big_prefill, 32, 8, 128, KvDtype::FP8, 16, {{big_t, big_t}}, HalfType::F16},
      {"prefill T=333", 14, 2, 64, KvDtype::F16, 16, {{333, 333}}, HalfType::F16},
      {"prefill T=333", 14, 2, 64, KvDtype::FP8, 16, {{333, 333}}, HalfType::F16},
      {"mixed", 14, 2, 64, KvDtype::F16, 16, mixed_a, HalfType::F16},
      {"mixed", 14, 2, 64, KvDtype::FP8, 32, {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}}, HalfType::F16},
      {"mixed", 32, 8, 128, KvDtype::F16, 16, mixed_b_d128, HalfType::F16},
      {"mixed", 32, 8, 128, KvDtype::FP8, 16, mixed_b_d128, HalfType::F16},
      {"mixed", 16, 8, 256, KvDtype::F16, 16, {{150, 600}, {1, 999}, {70, 70}}, HalfType::F16},
      {"decode b8 +pad", 4, 2, 16, KvDtype::F16, 16, pad8, HalfType::F16},
      {"decode b8 +pad", 4, 2, 16, KvDtype::FP8, 8, pad8, HalfType::F16},
      {"decode b8 +pad", 4, 2, 32, KvDtype::F16, 16, pad8, HalfType::F16},
      {"decode b8 +pad", 4, 2, 32, KvDtype::FP8, 16, pad8, HalfType::F16},
      {"prefill T=333", 4, 2, 16, KvDtype::F16, 16, {{333, 333}}, HalfType::F16},
      {"prefill T=333", 4, 2, 16, KvDtype::FP8, 16, {{333, 333}}, HalfType::F16},
      {"prefill T=200", 4, 2, 32, KvDtype::F16, 8, {{200, 200}}, HalfType::F16},
      {"prefill T=200", 4, 2, 32, KvDtype::FP8, 8, {{200, 200}}, HalfType::F16},
      {"mixed", 4, 2, 16, KvDtype::F16, 16, mixed_a, HalfType::F16},
      {"mixed", 4, 2, 16, KvDtype::FP8, 8, {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}, {3, 3}}, HalfType::F16},
      {"mixed", 4, 2, 32, KvDtype::F16, 32, mixed_b, HalfType::F16},
      // gpt-oss: 128-token sliding windows and sink logits (its heads are 64/8 of 64).
      {"sliding decode b8 +pad", 16, 2, 64, KvDtype::BF16, 16,
       {{1, 1}, {1, 128}, {1, 129}, {1, 700}, {1, 3000}, {1, 77}, {1, 0}, {1, 144}}, HalfType::BF16, 128, true},
      {"sinks decode (split-K)", 16, 2, 64, KvDtype::BF16, 16, {{1, 3000}, {1, 5}, {1, 1200}, {1, 600}},
       HalfType::BF16, 0, true},
      {"sliding prefill T=300", 16, 2, 64, KvDtype::BF16, 16, {{300, 300}}, HalfType::BF16, 128, true},
      {"sliding mixed", 16, 2, 64, KvDtype::BF16, 16,
       {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}, {129, 162}, {0, 50}, {65, 700}}, HalfType::BF16, 128, true},
      {"sliding mixed", 16, 2, 64, KvDtype::FP8, 16, {{300, 1000}, {1, 77}, {17, 2000}, {1, 4096}, {65, 700}},
       HalfType::BF16, 128, true},
      {"sliding mixed", 14, 2, 64, KvDtype::BF16, 16, mixed_a, HalfType::BF16, 200, false},
      {"sliding mixed", 4, 2, 16, KvDtype::BF16, 8, {{40, 100}, {1, 30}, {3, 3}}, HalfType::BF16, 1, true},
      {"sliding mixed", 4, 2, 32, KvDtype::F16, 16, mixed_b, HalfType::F16, 128, true},
      {"sinks prefill T=200", 4, 2, 32, KvDtype::BF16, 16, {{200, 200}}, HalfType::BF16, 0, true},
      {"sliding prefill T=300", 8, 8, 256, KvDtype::BF16, 16, {{300, 300}}, HalfType::BF16, 128, true},  // Q in shared
      // Encoders (BGE-M3: 16/16 of 64; the tiny XLM-R: 2/2 of 16): whole prompts,
      // every row seeing its sequence; one-row sequences go to the decode kernel. The last
      // case's cached prefix is no encoder's, but the kernel's rule is the same: all of it.
      {"encoder prefill", 16, 16, 64, KvDtype::BF16, 16, {{300, 300}, {1, 1}, {64, 64}, {17, 17}, {129, 129}},
       HalfType::BF16, 0, false, false},
      {"encoder prefill", 16, 16, 64, KvDtype::F16, 16, {{300, 300}, {1, 1}, {64, 64}, {17, 17}, {129, 129}},
       HalfType::F16, 0, false, false},
      {"encoder prefill", 16, 16, 64, KvDtype::FP8, 16, {{200, 200}, {65, 65}, {2, 2}}, HalfType::BF16, 0, false,
       false},
      {"encoder prefill", 2, 2, 16, KvDtype::BF16, 16, {{57, 57}, {3, 3}, {9, 9}, {1, 1}}, HalfType::BF16, 0, false,
       false},
      {"encoder mixed", 4, 2, 32, KvDtype::F16, 16, {{40, 100}, {1, 30}, {70, 70}}, HalfType::F16, 0, false, false},
      // Gemma 4's global layers (31B: 32/4 of 512; 26B-A4B: 16/2): GQA groups of 8 in two
      // decode head chunks of 4, prefill tiles of 32 rows with tails, each head's value
      // columns in two CTAs; decode rows of 999 and 2100 tokens take 8 and 17 partitions.
      // Groups of 6 (a second chunk of 2) and 1 leave heads of the 4-head decode CTA idle.
      {"mixed", 16, 2, 512, KvDtype::BF16, 16, {{150, 600}, {1, 999}, {70, 70}}},
      {"mixed", 16, 2, 512, KvDtype::F16, 16, {{70, 300}, {1, 999}, {33, 33}}, HalfType::F16},
      {"decode b4 +pad", 32, 4, 512, KvDtype::BF16, 16, {{1, 2100}, {1, 0}, {1, 77}, {1, 640}}},
      {"decode b4 +pad", 12, 2, 512, KvDtype::FP8, 8, {{1, 2100}, {1, 0}, {1, 77}, {1, 640}}},
      {"sliding mixed", 8, 8, 512, KvDtype::FP8, 16, {{100, 400}, {1, 700}, {33, 33}}, HalfType::F16, 128, true},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    seed += 10;
    // The emulator runs the large prefill (2048 rows of 32 heads) for minutes; its tiles
    // are the same code paths the T=1000 and mixed cases cover.
    if (emulated() && c.name == std::string("prefill T=2048")) continue;
    // CHECK_PART selects cases by name and head size ("mixed d512").
    run_part(kCheck, c.name + " d" + std::to_string(c.head_dim), [&] { check_case(c, seed); });
  }
  run_part(kCheck, "decode graph replay d128", check_graph_replay);
  run_part(kCheck, "rejects mismatched cache", check_rejects_mismatch);

#if SPARK_CUDA_EMU
  run_part(kCheck, "bytes sliding decode d64", bytes_sliding_decode);
  run_part(kCheck, "bytes decode d512", bytes_wide_head_decode);
  return;  // benchmarks mean nothing on the CPU emulator
#endif
  bench_decode(512, KvDtype::BF16);
  bench_decode(4096, KvDtype::BF16);
  bench_decode(4096, KvDtype::FP8);
  bench_decode(4096, KvDtype::F16, HalfType::F16);
  bench_prefill(2048, KvDtype::BF16);
  bench_prefill(2048, KvDtype::FP8);
  bench_prefill(2048, KvDtype::F16, HalfType::F16);
  bench_prefill(2048, KvDtype::FP8, HalfType::F16);
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("attention", [] { spark::gpu_check::run_all(); });
}
