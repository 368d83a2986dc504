// check_delta_net.cu — checks the Gated DeltaNet token mixer on CUDA (delta_net_mix)
// against cpu::delta_net, in both compute types: mixed batches (fresh prefills into dirty
// slots, decodes and prefill chunks continuing a state, a padding sequence, a sequence
// without rows, rows past the last sequence) over three calls, grouped and tiled value
// heads, tiny and real head dims; the last call as a captured graph of programmatic
// launches. Long prefills (the chunked form, partial last chunks) beside decodes, checked
// also against a run forced onto the recurrence to show which path ran. Also the bytes a
// decode call reads, beside their formula (emulator only).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cpu/delta_net.h"
#include "engine/backend/cuda/delta_net.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/recurrent_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
constexpr const char* kCheck = "delta_net";
// f32 state and f32 arithmetic on both sides; only the summation order differs.
constexpr double kStateLimit = 1e-4;
// The long calls' state matrices (mostly the chunked form, which reorders the sums):
// in the numpy prototype both the chunked form and the recurrence in f32 stay within
// 8e-7 of the recurrence in f64 (300 rows, dk 128, decays within 1e-3 of 1, near 0, and
// g = -200); measured here up to 2e-7. 2e-6 still fails a chunked form that sums G in
// float (2e-6 .. 6e-6 here).
constexpr double kLongStateLimit = 2e-6;
using namespace recurrent;

struct Case {
  std::string name;
  int32_t num_k_heads, num_v_heads, k_head_dim, v_head_dim, conv_kernel;
  bool tiled;
};

// One layer on both sides. cpu::delta_net computes its projections from a hidden state x;
// here x carries the projections' outputs themselves ([qkv | z | b | a]) and every
// projection selects its columns (weights 0 and 1), so both sides see the same numbers
// exactly; out_proj likewise copies the core output into the first value_dim columns.
struct Layer {
  ModelSpec::DeltaNet spec;
  cuda::DeltaNetShape shape;
  int64_t hidden = 0;
  std::vector<float> w_qkv, w_z, w_b, w_a, w_out;
  Tensor t_qkv, t_z, t_b, t_a, t_out;
  cpu::DeltaNetWeights cpu_w;
  DeviceArray<float> conv, neg_exp_a, dt_bias, norm;

  // with_cpu false: the device weights only (the byte count, at shapes whose selector
  // matrices would take gigabytes).
  Layer(const Case& c, uint64_t seed, bool with_cpu = true) {
    spec.num_k_heads = c.num_k_heads;
    spec.num_v_heads = c.num_v_heads;
    spec.k_head_dim = c.k_head_dim;
    spec.v_head_dim = c.v_head_dim;
    spec.conv_kernel = c.conv_kernel;
    spec.value_heads_tiled = c.tiled;
    shape = {c.num_k_heads, c.num_v_heads, c.k_head_dim, c.v_head_dim, c.conv_kernel, c.tiled, 1e-6f};
    const int64_t C = spec.conv_dim(), V = spec.value_dim(), H = spec.num_v_heads;
    hidden = C + V + 2 * H;
    cpu_w.conv = random_floats(size_t(C * spec.conv_kernel), seed, -0.7f, 0.7f);
    cpu_w.neg_exp_a = random_floats(size_t(H), seed + 1, -1.0f, 1.5f);
    for (float& v : cpu_w.neg_exp_a) v = -std::exp(v);
    cpu_w.dt_bias = random_floats(size_t(H), seed + 2, -1.0f, 1.0f);
    cpu_w.norm = random_floats(size_t(spec.v_head_dim), seed + 3, 0.5f, 1.5f);
    conv = DeviceArray<float>(cpu_w.conv);
    neg_exp_a = DeviceArray<float>(cpu_w.neg_exp_a);
    dt_bias = DeviceArray<float>(cpu_w.dt_bias);
    norm = DeviceArray<float>(cpu_w.norm);
    if (!with_cpu) return;
    auto selector = [&](int64_t rows, int64_t first_col) {
      std::vector<float> w(size_t(rows * hidden), 0.0f);
      for (int64_t r = 0; r < rows; ++r) w[size_t(r * hidden + first_col + r)] = 1.0f;
      return w;
    };
    w_qkv = selector(C, 0);
    w_z = selector(V, C);
    w_b = selector(H, C + V);
    w_a = selector(H, C + V + H);
    w_out.assign(size_t(hidden * V), 0.0f);  // [hidden, value_dim]: row o copies column o
    for (int64_t o = 0; o < V; ++o) w_out[size_t(o * V + o)] = 1.0f;
    t_qkv = f32_tensor(w_qkv, C, hidden);
    t_z = f32_tensor(w_z, V, hidden);
    t_b = f32_tensor(w_b, H, hidden);
    t_a = f32_tensor(w_a, H, hidden);
    t_out = f32_tensor(w_out, hidden, V);
    cpu_w.qkv = &t_qkv;
    cpu_w.z = &t_z;
    cpu_w.b = &t_b;
    cpu_w.a = &t_a;
    cpu_w.out = &t_out;
  }
  cuda::DeltaNetLayerWeights device() const { return {conv.get(), neg_exp_a.get(), dt_bias.get(), norm.get()}; }
};

// One call on both sides; rows past the sequences: `extra_rows`. Rows the conv_dim rows of
// x: random, with a few `a` values past softplus's threshold (20).
// Returns the device pool after the call.
template <typename T>
std::vector<float> run_call(const Case& c, Layer& L, Pool& pool, const std::vector<Seq>& seqs, int32_t extra_rows,
                            uint64_t seed, bool graph, const std::string& label, double state_limit = kStateLimit) {
  const ModelSpec::DeltaNet& d = L.spec;
  const int64_t C = d.conv_dim(), V = d.value_dim(), H = d.num_v_heads;
  const Rows r = batch_rows(seqs, extra_rows);
  const int32_t tokens = r.tokens;

  std::vector<float> x(size_t(tokens * L.hidden));
  const std::vector<float> qkv_v = random_floats(size_t(tokens * C), seed, -2.0f, 2.0f);
  const std::vector<float> z_v = random_floats(size_t(tokens * V), seed + 1, -3.0f, 3.0f);
  std::vector<float> b_v = random_floats(size_t(tokens * H), seed + 2, -3.0f, 3.0f);
  std::vector<float> a_v = random_floats(size_t(tokens * H), seed + 3, -3.0f, 3.0f);
  // Past softplus's threshold (20, the linear branch) on the first row of the second
  // sequence, head 1: in calls 2 and 3 a row that continues a state.
  if (seqs.size() > 1 && seqs[1].rows > 0) a_v[size_t(r.query_start[1] * H + 1)] = 24.0f;
  // In a long first sequence (the chunked form): a decay near 0 (g about -100) mid-chunk on
  // head 0, and decays within 1e-8 of 1 over rows 10 .. 29 of head 1.
  if (!seqs.empty() && seqs[0].rows > 40) {
    a_v[size_t(37 * H)] = 24.0f;
    for (int64_t t = 10; t < 30; ++t) a_v[size_t(t * H + 1 % H)] = -20.0f;
  }
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = x.data() + t * L.hidden;
    std::copy_n(qkv_v.begin() + t * C, C, row);
    std::copy_n(z_v.begin() + t * V, V, row + C);
    std::copy_n(b_v.begin() + t * H, H, row + C + V);
    std::copy_n(a_v.begin() + t * H, H, row + C + V + H);
  }

  CpuStates states = cpu_states(pool, seqs);
  Batch batch;
  batch.token_ids.assign(size_t(r.seq_rows), 1);
  batch.query_start = r.query_start;
  ThreadPool threads(2);
  cpu::DeltaNetScratch scratch;
  std::vector<float> cpu_out(size_t(r.seq_rows * L.hidden));
  cpu::delta_net(threads, d, L.cpu_w, L.shape.eps, batch, states.of_seq, x.data(), scratch, cpu_out.data());
  const Expected want = expected_out(cpu_out, L.hidden, V, seqs, r);

  // Device.
  const std::vector<float> before = pool.device.download();
  DeviceArray<int32_t> d_qs(r.query_start), d_pos(r.positions), d_slots(r.slots);
  DeviceArray<float> d_qkv(qkv_v), d_z(z_v), d_b(b_v), d_a(a_v);
  DeviceArray<T> d_out(size_t(tokens * V));
  d_out.poison();
  const cuda::RecurrentStates st{pool.device.get(), pool.slot_stride, pool.layer_offset, d_slots.get()};
  launch_call(graph, [&](cudaStream_t stream, bool programmatic) {
    cuda::delta_net_mix<T>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), r.num_seqs, tokens, d_qkv.get(),
                           d_z.get(), d_b.get(), d_a.get(), d_out.get(), stream, programmatic);
  });

  const std::string what = call_name<T>(c.name, label, seqs, extra_rows);
  check_out(kCheck, what, want, d_out, V);
  return check_states(kCheck, what, pool, before, states.written, d.conv_dim() * (d.conv_kernel - 1), kStateLimit,
                      state_limit);
}

template <typename T>
void check_case(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  Pool pool(L.spec.state_values(), seed + 10);
  mixed_calls(seed, [&](const std::vector<Seq>& seqs, int32_t extra_rows, uint64_t call_seed, bool graph,
                        const std::string& label) {
    run_call<T>(c, L, pool, seqs, extra_rows, call_seed, graph, label);
  });
}

// Sets the chunked form's row threshold for a scope.
struct ChunkMinRows {
  int32_t old;
  explicit ChunkMinRows(int32_t rows) : old(cuda::delta_net_set_chunk_min_rows(rows)) {}
  ~ChunkMinRows() { cuda::delta_net_set_chunk_min_rows(old); }
};

// Long prefills (the chunked form: 63, 64, 65, 130, 300 rows, partial last chunks) beside
// decodes and short chunks in one call, from position 0 and continuing, the second call a
// captured graph; then the same two calls from the same pool with every sequence forced
// onto the recurrence. Both runs are checked against cpu::delta_net; between them, the
// state matrices of slots that saw a sequence of >= 16 rows differ (the chunked form ran:
// it sums in another order) and those of slots that saw only shorter ones are
// bit-identical (the recurrence ran in both). Then a call with the threshold at 1: one-
// and three-row sequences through the chunked form; last, a call with room for a single
// long sequence (the chunked kernel's grid has one sequence row) that comes last.
template <typename T>
void check_long(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  const std::vector<Seq> first = {{0, 0, 300}, {1, 0, 1}, {2, 0, 63}, {3, 0, 64}, {4, 0, 65}, {-1, 0, 40}, {5, 0, 2}};
  const std::vector<Seq> second = {{0, 300, 130}, {1, 1, 1},  {2, 63, 65}, {3, 64, 1},
                                   {4, 65, 16},   {5, 2, 64}, {6, 0, 15},  {7, 0, 16}};
  const std::vector<bool> long_slot = {true, false, true, true, true, true, false, true};
  Pool chunked(L.spec.state_values(), seed + 10), recurrent(L.spec.state_values(), seed + 10);
  run_call<T>(c, L, chunked, first, 0, seed + 20, false, "long 1", kLongStateLimit);
  const std::vector<float> got =
      run_call<T>(c, L, chunked, second, 2, seed + 30, true, "long 2 graph", kLongStateLimit);
  std::vector<float> forced;
  {
    const ChunkMinRows all_recurrent(INT32_MAX);
    run_call<T>(c, L, recurrent, first, 0, seed + 20, false, "long 1 forced recurrent", kLongStateLimit);
    forced = run_call<T>(c, L, recurrent, second, 2, seed + 30, true, "long 2 forced recurrent", kLongStateLimit);
  }
  dispatch_rows(kCheck, c.name + " " + half_name<T>() + " dispatch vs forced recurrence", chunked, got, forced,
                long_slot, L.spec.conv_dim() * (L.spec.conv_kernel - 1));

  {
    const ChunkMinRows all_chunked(1);
    run_call<T>(c, L, chunked, {{1, 2, 1}, {3, 65, 1}, {-1, 0, 1}, {6, 15, 3}, {0, 430, 1}}, 1, seed + 40, false,
                "threshold 1", kLongStateLimit);
  }
  // 20 rows: room for one long sequence, the last, behind short and padding ones.
  run_call<T>(c, L, chunked, {{6, 18, 1}, {-1, 0, 1}, {1, 3, 1}, {7, 16, 17}}, 0, seed + 50, false, "one long last",
              kLongStateLimit);
}

// The bytes a decode call of B sequences (one row each, continuing their states) must
// move in this design: per sequence the state matrices Hv dk dv 4 and the conv state
// C (K-1) 4, read and written; qkv C 4 read and written by the conv, then q, k, v
// (2 key_dim + value_dim) 4 read and o value_dim 4 written by the delta rule; o and z
// 2 value_dim 4 read and out value_dim 2 written by the norm; a and b 2 Hv 4 read. Per
// call the conv weights C K 4, neg_exp_a, dt_bias and the norm weight.
DecodeBytes decode_bytes(const ModelSpec::DeltaNet& d, int64_t B) {
  const double C = double(d.conv_dim()), V = double(d.value_dim()), H = double(d.num_v_heads),
               K = double(d.conv_kernel);
  const double matrices = H * double(d.k_head_dim) * double(d.v_head_dim);
  const double per_seq_read = 4.0 * (matrices + C * (K - 1) + C + 2.0 * double(d.key_dim()) + V + 2 * V + 2 * H);
  const double per_call_read = 4.0 * (C * K + 2 * H + double(d.v_head_dim));
  const double per_seq_written = 4.0 * (matrices + C * (K - 1) + C + V) + 2.0 * V;
  return {double(B) * per_seq_read + per_call_read, double(B) * per_seq_written};
}

#if SPARK_CUDA_EMU
// The bytes one decode call reads, as the emulator counts them (state, qkv and o loads
// every time, __ldg sectors once), against decode_bytes. Integers and partly read sectors
// are the margin, 1%: small enough that a second read of the conv state or of v fails.
void check_decode_bytes(const Case& c, int64_t B) {
  Layer L(c, 901, false);
  const ModelSpec::DeltaNet& d = L.spec;
  const int64_t C = d.conv_dim(), V = d.value_dim(), H = d.num_v_heads, sv = d.state_values();
  const int64_t matrices = H * d.k_head_dim * d.v_head_dim;
  // A permutation: every slot once.
  const Rows r = decode_rows(B, [B](int64_t s) { return (s * 3 + 1) % B; }, 7, 13);
  DeviceArray<float> states(random_floats(size_t(B * sv), 902));
  DeviceArray<int32_t> d_slots(r.slots), d_qs(r.query_start), d_pos(r.positions);
  DeviceArray<float> qkv(random_floats(size_t(B * C), 903)), z(random_floats(size_t(B * V), 904)),
      b(random_floats(size_t(B * H), 905)), a(random_floats(size_t(B * H), 906));
  DeviceArray<bf16> out(size_t(B * V));
  ::emu::global_reads_begin();
  cuda::delta_net_mix<bf16>(L.shape, L.device(), {states.get(), sv, 0, d_slots.get()}, d_qs.get(), d_pos.get(),
                            int32_t(B), int32_t(B), qkv.get(), z.get(), b.get(), a.get(), out.get(), nullptr);
  sync();
  const double reads = double(::emu::global_reads_end().total());
  const std::string what = "bytes decode b" + std::to_string(B) + " " + c.name + " bf16";
  decode_bytes_rows(kCheck, what, reads, decode_bytes(d, B), 2.0 * double(B) * 4.0 * double(matrices));
}
#endif

// Decode at Qwen3.6-35B-A3B's shape (16/32 heads of 128, conv_kernel 4), one row a
// sequence, against the bytes it must move (the byte rows' formula, read + written): the
// gap to the copy bandwidth says how far from the floor it is. The states rotate through
// enough copies (one per "layer" of the slot) to miss the L2, as 30 layers' states do.
void bench_decode() {
  const Case c{"16/32 hd128", 16, 32, 128, 128, 4, false};
  Layer L(c, 950, false);
  const ModelSpec::DeltaNet& d = L.spec;
  const int64_t C = d.conv_dim(), V = d.value_dim(), H = d.num_v_heads, sv = d.state_values();
  const double copy_gbs = copy_bandwidth_gbs();
  for (int64_t B : {1, 4, 16, 64}) {
    const DecodeBytes bytes = decode_bytes(d, B);
    const int copies = bench_copies(B, sv);
    const Rows r = decode_rows(B, [](int64_t s) { return s; }, 100, 1);
    DeviceArray<float> states(random_floats(size_t(B * copies * sv), 951, -0.1f, 0.1f));
    DeviceArray<int32_t> d_slots(r.slots), d_qs(r.query_start), d_pos(r.positions);
    DeviceArray<float> qkv(random_floats(size_t(B * C), 952)), z(random_floats(size_t(B * V), 953)),
        b(random_floats(size_t(B * H), 954)), a(random_floats(size_t(B * H), 955));
    DeviceArray<bf16> out(size_t(B * V));
    int it = 0;
    const double ms = time_ms([&] {
      const cuda::RecurrentStates st{states.get(), copies * sv, (it++ % copies) * sv, d_slots.get()};
      // qkv is overwritten in place each run: its contents do not change the time.
      cuda::delta_net_mix<bf16>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), int32_t(B), int32_t(B), qkv.get(),
                                z.get(), b.get(), a.get(), out.get(), nullptr);
    });
    bench_row(kCheck, "bench decode b" + std::to_string(B) + " " + c.name + " bf16", ms, bytes, copy_gbs);
  }
}

void run() {
  const std::vector<Case> cases = {
      {"2/4 hd16 grouped", 2, 4, 16, 16, 4, false},
      {"2/4 hd16 tiled", 2, 4, 16, 16, 4, true},
      {"2/2 hd8", 2, 2, 8, 8, 4, false},
      {"3/6 dk24 dv40 k3 tiled", 3, 6, 24, 40, 3, true},
      {"1/2 dk256 dv64 k2", 1, 2, 256, 64, 2, false},
      {"2/4 hd128 grouped", 2, 4, 128, 128, 4, false},
      {"2/4 hd128 tiled", 2, 4, 128, 128, 4, true},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    run_part(kCheck, c.name + " bf16", [&] { check_case<bf16>(c, seed); });
    run_part(kCheck, c.name + " f16", [&] { check_case<f16>(c, seed + 1000); });
    seed += 100;
  }
  const std::vector<Case> long_cases = {
      {"2/4 hd16 grouped", 2, 4, 16, 16, 4, false},
      {"3/6 dk24 dv40 k3 tiled", 3, 6, 24, 40, 3, true},
      {"1/2 dk256 dv64 k2", 1, 2, 256, 64, 2, false},
      {"2/4 hd128 tiled", 2, 4, 128, 128, 4, true},
  };
  for (const Case& c : long_cases) {
    run_part(kCheck, "long " + c.name + " bf16", [&] { check_long<bf16>(c, seed); });
    seed += 100;
  }
  run_part(kCheck, "long 2/4 hd16 grouped f16", [&] { check_long<f16>(long_cases[0], seed); });
#if SPARK_CUDA_EMU
  run_part(kCheck, "bytes decode 2/4 hd128", [] { check_decode_bytes({"2/4 hd128", 2, 4, 128, 128, 4, false}, 4); });
  run_part(kCheck, "bytes decode Qwen3.6-35B-A3B", [] {
    check_decode_bytes({"16/32 hd128 (Qwen3.6-35B-A3B)", 16, 32, 128, 128, 4, false}, 2);
  });
#else
  skip_row(kCheck, "bytes decode", "counted by the emulator only");
#endif
  if (emulated()) return;  // benchmarks mean nothing on the CPU emulator
  run_part(kCheck, "bench decode", bench_decode);
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("delta_net", [] { spark::gpu_check::run(); });
}
