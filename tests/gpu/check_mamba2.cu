// check_mamba2.cu — checks the Mamba-2 token mixer on CUDA (mamba2_mix) against
// cpu::mamba2, in both compute types: mixed batches (fresh prefills into dirty slots,
// decodes and prefill chunks continuing a state, a padding sequence, a sequence without
// rows, rows past the last sequence) over three calls, the last as a captured graph of
// programmatic launches; tiny shapes (partial row tiles and state columns, conv_kernel 1
// and 3, no conv bias, both dt clamps, state columns past 32 a lane) and Nemotron-3-Nano's
// per-layer shape (64 heads of 64, 8 groups, state 128, conv 4); long prefills (many
// steps of the recurrence) continued by more. The chunked SSD scan: prompts shorter than,
// as long as and several chunks longer than its chunk beside decodes and padding, fresh
// and continued, strong and weak decays, odd shapes, checked also against a run forced
// onto the recurrence to show which path ran. Also the bytes a decode call and a long
// prefill read, beside their formula (emulator only).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cpu/mamba2.h"
#include "engine/backend/cuda/mamba2.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/recurrent_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
constexpr const char* kCheck = "mamba2";
// f32 state and f32 arithmetic on both sides; only the summation order differs.
constexpr double kStateLimit = 1e-4;
// The chunked calls' state matrices (the chunked form reorders the sums): measured here
// up to 1.4e-7. 5e-7 still fails a chunked form that sums L in float (up to 1.1e-6 here).
constexpr double kLongStateLimit = 5e-7;
using namespace recurrent;

struct Case {
  std::string name;
  int32_t num_heads, head_dim, n_groups, state_size, conv_kernel;
  bool conv_bias;
  double dt_min, dt_max;
};

// One layer on both sides. cpu::mamba2 computes in_proj from a hidden state x; here x
// carries in_proj's output itself ([z | x|B|C | dt]) and in_proj is the identity, so both
// sides see the same numbers exactly; out_proj likewise copies the norm's output into the
// first inner columns.
struct Layer {
  ModelSpec::Mamba2 spec;
  cuda::Mamba2Shape shape;
  int64_t hidden = 0;
  std::vector<float> w_in, w_out;
  Tensor t_in, t_out;
  cpu::Mamba2Weights cpu_w;
  DeviceArray<float> conv, conv_bias, neg_exp_a, d, dt_bias, norm;

  // with_cpu false: the device weights only (the byte count).
  Layer(const Case& c, uint64_t seed, bool with_cpu = true) {
    spec.num_heads = c.num_heads;
    spec.head_dim = c.head_dim;
    spec.n_groups = c.n_groups;
    spec.state_size = c.state_size;
    spec.conv_kernel = c.conv_kernel;
    spec.conv_bias = c.conv_bias;
    spec.dt_min = c.dt_min;
    spec.dt_max = c.dt_max;
    shape = {c.num_heads, c.head_dim, c.n_groups, c.state_size, c.conv_kernel, float(c.dt_min), float(c.dt_max), 1e-5f};
    const int64_t C = spec.conv_dim(), H = spec.num_heads, I = spec.inner(), P = spec.in_proj_rows();
    hidden = P;
    cpu_w.conv = random_floats(size_t(C * spec.conv_kernel), seed, -0.7f, 0.7f);
    if (c.conv_bias) cpu_w.conv_bias = random_floats(size_t(C), seed + 1, -0.5f, 0.5f);
    cpu_w.neg_exp_a = random_floats(size_t(H), seed + 2, -1.0f, 1.5f);
    for (float& v : cpu_w.neg_exp_a) v = -std::exp(v);
    cpu_w.d = random_floats(size_t(H), seed + 3, -1.0f, 1.0f);
    cpu_w.dt_bias = random_floats(size_t(H), seed + 4, -1.0f, 1.0f);
    cpu_w.norm = random_floats(size_t(I), seed + 5, 0.5f, 1.5f);
    conv = DeviceArray<float>(cpu_w.conv);
    if (c.conv_bias) conv_bias = DeviceArray<float>(cpu_w.conv_bias);
    neg_exp_a = DeviceArray<float>(cpu_w.neg_exp_a);
    d = DeviceArray<float>(cpu_w.d);
    dt_bias = DeviceArray<float>(cpu_w.dt_bias);
    norm = DeviceArray<float>(cpu_w.norm);
    if (!with_cpu) return;
    w_in.assign(size_t(P * P), 0.0f);
    for (int64_t r = 0; r < P; ++r) w_in[size_t(r * P + r)] = 1.0f;
    w_out.assign(size_t(hidden * I), 0.0f);  // [hidden, inner]: row o copies column o
    for (int64_t o = 0; o < I; ++o) w_out[size_t(o * I + o)] = 1.0f;
    t_in = f32_tensor(w_in, P, P);
    t_out = f32_tensor(w_out, hidden, I);
    cpu_w.in_proj = &t_in;
    cpu_w.out = &t_out;
  }
  cuda::Mamba2LayerWeights device() const {
    return {conv.get(), spec.conv_bias ? conv_bias.get() : nullptr, neg_exp_a.get(), d.get(), dt_bias.get(),
            norm.get()};
  }
};

// One call on both sides; rows past the sequences: `extra_rows`. in_proj's output is
// random, with one dt value past softplus's threshold (20).
// Returns the device pool after the call.
template <typename T>
std::vector<float> run_call(const Case& c, Layer& L, Pool& pool, const std::vector<Seq>& seqs, int32_t extra_rows,
                            uint64_t seed, bool graph, const std::string& label, double state_limit = kStateLimit) {
  const ModelSpec::Mamba2& m = L.spec;
  const int64_t I = m.inner(), C = m.conv_dim(), H = m.num_heads, P = m.in_proj_rows();
  const Rows r = batch_rows(seqs, extra_rows);
  const int32_t tokens = r.tokens;

  std::vector<float> proj(size_t(tokens * P));
  {
    const std::vector<float> z_v = random_floats(size_t(tokens * I), seed, -3.0f, 3.0f);
    const std::vector<float> xbc_v = random_floats(size_t(tokens * C), seed + 1, -2.0f, 2.0f);
    const std::vector<float> dt_v = random_floats(size_t(tokens * H), seed + 2, -3.0f, 3.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = proj.data() + t * P;
      std::copy_n(z_v.begin() + t * I, I, row);
      std::copy_n(xbc_v.begin() + t * C, C, row + I);
      std::copy_n(dt_v.begin() + t * H, H, row + I + C);
    }
  }
  // Past softplus's threshold (20, the linear branch) on the first row of the second
  // sequence, head H - 1: in calls 2 and 3 a row that continues a state.
  if (seqs.size() > 1 && seqs[1].rows > 0) proj[size_t(r.query_start[1] * P + I + C + H - 1)] = 24.0f;
  // In a long first sequence (the chunked form): dt past the threshold (a decay near 0)
  // mid-chunk on head 0, and dt at its floor (decays within dt_min |A| of 1) over rows
  // 10 .. 29 of head 1.
  if (!seqs.empty() && seqs[0].rows > 40) {
    proj[size_t(37 * P + I + C)] = 24.0f;
    for (int64_t t = 10; t < 30; ++t) proj[size_t(t * P + I + C + 1 % H)] = -20.0f;
  }

  CpuStates states = cpu_states(pool, seqs);
  Batch batch;
  batch.token_ids.assign(size_t(r.seq_rows), 1);
  batch.positions.assign(r.positions.begin(), r.positions.begin() + r.seq_rows);
  batch.query_start = r.query_start;
  ThreadPool threads(2);
  cpu::Mamba2Scratch scratch;
  std::vector<float> cpu_out(size_t(r.seq_rows * L.hidden));
  cpu::mamba2(threads, m, L.cpu_w, L.shape.eps, batch, states.of_seq, proj.data(), scratch, cpu_out.data());
  const Expected want = expected_out(cpu_out, L.hidden, I, seqs, r);

  // Device.
  const std::vector<float> before = pool.device.download();
  DeviceArray<int32_t> d_qs(r.query_start), d_pos(r.positions), d_slots(r.slots);
  DeviceArray<float> d_proj(proj);
  DeviceArray<T> d_out(size_t(tokens * I));
  d_out.poison();
  const cuda::RecurrentStates st{pool.device.get(), pool.slot_stride, pool.layer_offset, d_slots.get()};
  launch_call(graph, [&](cudaStream_t stream, bool programmatic) {
    cuda::mamba2_mix<T>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), r.num_seqs, tokens, d_proj.get(), d_out.get(),
                        stream, programmatic);
  });

  const std::string what = call_name<T>(c.name, label, seqs, extra_rows);
  check_out(kCheck, what, want, d_out, I);
  return check_states(kCheck, what, pool, before, states.written, m.conv_dim() * (m.conv_kernel - 1), kStateLimit,
                      state_limit);
}

template <typename T>
void check_case(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  Pool pool(L.spec.state_values(), seed + 10);
  mixed_calls(seed,
              [&](const std::vector<Seq>& seqs, int32_t extra_rows, uint64_t call_seed, bool graph,
                  const std::string& label) { run_call<T>(c, L, pool, seqs, extra_rows, call_seed, graph, label); });
}

// Long prefills beside a decode and a padding sequence, then continued by a second prefill
// chunk and a decode: many steps of the recurrence in one call.
template <typename T>
void check_long(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  Pool pool(L.spec.state_values(), seed + 10);
  run_call<T>(c, L, pool, {{0, 0, 70}, {1, 0, 1}, {-1, 0, 5}, {2, 0, 33}}, 0, seed + 20, false, "long 1");
  run_call<T>(c, L, pool, {{0, 70, 40}, {2, 33, 1}, {1, 1, 17}}, 2, seed + 30, true, "long 2 graph");
}

// Sets the chunked form's row threshold for a scope.
struct ChunkMinRows {
  int32_t old;
  explicit ChunkMinRows(int32_t rows) : old(cuda::mamba2_set_chunk_min_rows(rows)) {}
  ~ChunkMinRows() { cuda::mamba2_set_chunk_min_rows(old); }
};

// The chunked SSD scan (32-row chunks): long prefills of 300 (9 chunks and a partial
// one), 31, 32, 33 and 101 rows beside decodes, a two-row prefill and padding in one call,
// from position 0 (dirty slots) and with strong and weak decays (run_call), then
// continued by a second call, a captured graph (chunks of 70, 33, 64, 16 rows from
// non-zero positions); then the same two calls from the same pool with every sequence
// forced onto the recurrence. Both runs are checked against cpu::mamba2; between them, the
// state matrices of slots that saw a sequence of >= 16 rows differ (the chunked form ran:
// it sums in another order) and those of slots that saw only shorter ones are
// bit-identical (the recurrence ran in both). Then a call with the threshold at 1: one-
// and three-row sequences through the chunked form; last, a call with room for a single
// long sequence (the chunked kernel's grid has one sequence row) that comes last.
// strong_a: head 0's A is -40 (a decay of exp(-40 dt) a row).
template <typename T>
void check_chunked(const Case& c, uint64_t seed, bool strong_a = false) {
  Layer L(c, seed);
  if (strong_a) {
    L.cpu_w.neg_exp_a[0] = -40.0f;
    L.neg_exp_a = DeviceArray<float>(L.cpu_w.neg_exp_a);
  }
  const std::vector<Seq> first = {{0, 0, 300}, {1, 0, 1},   {2, 0, 31}, {3, 0, 32},
                                  {4, 0, 33},  {-1, 0, 40}, {5, 0, 2},  {7, 0, 101}};
  const std::vector<Seq> second = {{0, 300, 70}, {1, 1, 1},  {2, 31, 33}, {3, 32, 1},
                                   {4, 33, 16},  {5, 2, 64}, {6, 0, 15},  {7, 101, 1}};
  const std::vector<bool> long_slot = {true, false, true, true, true, true, false, true};
  const std::string name = strong_a ? c.name + " A=-40" : c.name;
  const Case named{name,          c.num_heads, c.head_dim, c.n_groups, c.state_size,
                   c.conv_kernel, c.conv_bias, c.dt_min,   c.dt_max};
  Pool chunked(L.spec.state_values(), seed + 10), recurrent(L.spec.state_values(), seed + 10);
  run_call<T>(named, L, chunked, first, 0, seed + 20, false, "chunked 1", kLongStateLimit);
  const std::vector<float> got =
      run_call<T>(named, L, chunked, second, 2, seed + 30, true, "chunked 2 graph", kLongStateLimit);
  std::vector<float> forced;
  {
    const ChunkMinRows all_recurrent(INT32_MAX);
    run_call<T>(named, L, recurrent, first, 0, seed + 20, false, "chunked 1 forced recurrent", kLongStateLimit);
    forced =
        run_call<T>(named, L, recurrent, second, 2, seed + 30, true, "chunked 2 forced recurrent", kLongStateLimit);
  }
  dispatch_rows(kCheck, name + " " + half_name<T>() + " dispatch vs forced recurrence", chunked, got, forced, long_slot,
                L.spec.conv_dim() * (L.spec.conv_kernel - 1));

  {
    const ChunkMinRows all_chunked(1);
    run_call<T>(named, L, chunked, {{1, 2, 1}, {3, 33, 1}, {-1, 0, 1}, {6, 15, 3}, {0, 370, 1}}, 1, seed + 40, false,
                "threshold 1", kLongStateLimit);
  }
  // 20 rows: room for one long sequence, the last, behind short and padding ones.
  run_call<T>(named, L, chunked, {{6, 18, 1}, {-1, 0, 1}, {1, 3, 1}, {7, 102, 17}}, 0, seed + 50, false,
              "one long last", kLongStateLimit);
}

// The bytes a call of B sequences of `rows` rows each (continuing their states) must move
// in this design: per sequence the state matrices H hd N 4 and the conv state C (K-1) 4,
// read and written once, whatever the rows; per row proj's x|B|C C 4 read and written by
// the conv, then x inner 4, the group's B and C 2 G N 4 and dt H 4 read and y inner 4
// written by the state update; y and z 2 inner 4 read and out inner 2 written by the
// norm. Per call the conv weights C K 4 and bias C 4, A, D and dt_bias 3 H 4, the norm
// weight inner 4.
DecodeBytes call_bytes(const ModelSpec::Mamba2& m, int64_t B, int64_t rows) {
  const double C = double(m.conv_dim()), I = double(m.inner()), H = double(m.num_heads), K = double(m.conv_kernel),
               GN = double(m.n_groups) * double(m.state_size), T = double(rows);
  const double matrices = H * double(m.head_dim) * double(m.state_size);
  const double per_seq_read = 4.0 * (matrices + C * (K - 1)) + T * 4.0 * (C + I + 2 * GN + H + 2 * I);
  const double per_call_read = 4.0 * (C * K + (m.conv_bias ? C : 0.0) + 3 * H + I);
  const double per_seq_written = 4.0 * (matrices + C * (K - 1)) + T * (4.0 * (C + I) + 2.0 * I);
  return {double(B) * per_seq_read + per_call_read, double(B) * per_seq_written};
}
DecodeBytes decode_bytes(const ModelSpec::Mamba2& m, int64_t B) { return call_bytes(m, B, 1); }

#if SPARK_CUDA_EMU
// The bytes one decode call reads, as the emulator counts them (state, proj's x|B|C and y
// loads every time, __ldg sectors once), against decode_bytes. Integers and partly read
// sectors are the margin, 1%: small enough that a second read of the conv state or of x fails.
void check_decode_bytes(const Case& c, int64_t B) {
  Layer L(c, 901, false);
  const ModelSpec::Mamba2& m = L.spec;
  const int64_t P = m.in_proj_rows(), I = m.inner(), sv = m.state_values();
  const int64_t matrices = int64_t(m.num_heads) * m.head_dim * m.state_size;
  // A permutation: every slot once.
  const Rows r = decode_rows(
      B, [B](int64_t s) { return (s * 3 + 1) % B; }, 7, 13);
  DeviceArray<float> states(random_floats(size_t(B * sv), 902));
  DeviceArray<int32_t> d_slots(r.slots), d_qs(r.query_start), d_pos(r.positions);
  DeviceArray<float> proj(random_floats(size_t(B * P), 903));
  DeviceArray<bf16> out(size_t(B * I));
  ::emu::global_reads_begin();
  cuda::mamba2_mix<bf16>(L.shape, L.device(), {states.get(), sv, 0, d_slots.get()}, d_qs.get(), d_pos.get(), int32_t(B),
                         int32_t(B), proj.get(), out.get(), nullptr);
  sync();
  const double reads = double(::emu::global_reads_end().total());
  const std::string what = "bytes decode b" + std::to_string(B) + " " + c.name + " bf16";
  decode_bytes_rows(kCheck, what, reads, decode_bytes(m, B), 2.0 * double(B) * 4.0 * double(matrices));
}

// The bytes a prefill call of B sequences of `rows` rows each (the chunked form, continuing
// their states) reads, as the emulator counts them, against call_bytes: each state element
// read once for the whole prefill, not once a row or a chunk (a second read of the state
// matrices is 2 MiB of 26 at Nemotron-3-Nano's shape and 300 rows, past the 1% margin).
void check_prefill_bytes(const Case& c, int64_t B, int32_t rows) {
  Layer L(c, 905, false);
  const ModelSpec::Mamba2& m = L.spec;
  const int64_t P = m.in_proj_rows(), I = m.inner(), sv = m.state_values();
  const int64_t matrices = int64_t(m.num_heads) * m.head_dim * m.state_size;
  Rows r;
  for (int64_t s = 0; s < B; ++s) {
    r.slots.push_back(int32_t(B - 1 - s));
    r.query_start.push_back(r.query_start.back() + rows);
    for (int32_t i = 0; i < rows; ++i) r.positions.push_back(int32_t(9 + 5 * s + i));
  }
  r.seq_rows = r.tokens = r.query_start.back();
  r.num_seqs = int32_t(B);
  DeviceArray<float> states(random_floats(size_t(B * sv), 906, -0.1f, 0.1f));
  DeviceArray<int32_t> d_slots(r.slots), d_qs(r.query_start), d_pos(r.positions);
  DeviceArray<float> proj(random_floats(size_t(r.tokens * P), 907));
  DeviceArray<bf16> out(size_t(r.tokens * I));
  ::emu::global_reads_begin();
  cuda::mamba2_mix<bf16>(L.shape, L.device(), {states.get(), sv, 0, d_slots.get()}, d_qs.get(), d_pos.get(), int32_t(B),
                         r.tokens, proj.get(), out.get(), nullptr);
  sync();
  const double reads = double(::emu::global_reads_end().total());
  const std::string what = "bytes prefill " + std::to_string(B) + "x" + std::to_string(rows) + " " + c.name + " bf16";
  decode_bytes_rows(kCheck, what, reads, call_bytes(m, B, rows), 2.0 * double(B) * 4.0 * double(matrices));
}
#endif

// Decode at Nemotron-3-Nano's shape, one row a sequence, against the bytes it must move
// (read + written): the gap to the copy bandwidth says how far from the floor it is. The
// states rotate through enough copies (one per "layer" of the slot) to miss the L2.
void bench_decode() {
  const Case c{"64h hd64 g8 N128", 64, 64, 8, 128, 4, true, 1e-3, 0.0};
  Layer L(c, 950, false);
  const ModelSpec::Mamba2& m = L.spec;
  const int64_t P = m.in_proj_rows(), I = m.inner(), sv = m.state_values();
  const double copy_gbs = copy_bandwidth_gbs();
  for (int64_t B : {1, 4, 16, 64}) {
    const DecodeBytes bytes = decode_bytes(m, B);
    const int copies = bench_copies(B, sv);
    const Rows r = decode_rows(
        B, [](int64_t s) { return s; }, 100, 1);
    DeviceArray<float> states(random_floats(size_t(B * copies * sv), 951, -0.1f, 0.1f));
    DeviceArray<int32_t> d_slots(r.slots), d_qs(r.query_start), d_pos(r.positions);
    DeviceArray<float> proj(random_floats(size_t(B * P), 952));
    DeviceArray<bf16> out(size_t(B * I));
    int it = 0;
    const double ms = time_ms([&] {
      const cuda::RecurrentStates st{states.get(), copies * sv, (it++ % copies) * sv, d_slots.get()};
      // proj is overwritten in place each run: its contents do not change the time.
      cuda::mamba2_mix<bf16>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), int32_t(B), int32_t(B), proj.get(),
                             out.get(), nullptr);
    });
    bench_row(kCheck, "bench decode b" + std::to_string(B) + " " + c.name + " bf16", ms, bytes, copy_gbs);
  }
}

void run() {
  // name, heads, head_dim, groups, state, conv_kernel, conv bias, dt_min, dt_max
  const std::vector<Case> cases = {
      {"2h hd8 g1 N16 k4", 2, 8, 1, 16, 4, true, 1e-3, 0.0},
      {"4h hd16 g2 N32 k4 no-bias", 4, 16, 2, 32, 4, false, 1e-3, 0.0},
      {"6h hd24 g3 N40 k3 dt-clamped", 6, 24, 3, 40, 3, true, 0.3, 1.5},
      {"3h hd5 g1 N200 k1", 3, 5, 1, 200, 1, true, 0.0, 0.0},
      {"2h hd64 g2 N128 k2", 2, 64, 2, 128, 2, true, 1e-3, 0.0},
      {"64h hd64 g8 N128 k4 (Nemotron-3-Nano)", 64, 64, 8, 128, 4, true, 1e-3, 0.0},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    run_part(kCheck, c.name + " bf16", [&] { check_case<bf16>(c, seed); });
    run_part(kCheck, c.name + " f16", [&] { check_case<f16>(c, seed + 1000); });
    seed += 100;
  }
  for (size_t i : {size_t(2), size_t(4)}) {
    run_part(kCheck, "long " + cases[i].name + " bf16", [&] { check_long<bf16>(cases[i], seed); });
    seed += 100;
  }
  // name, heads, head_dim, groups, state, conv_kernel, conv bias, dt_min, dt_max
  const std::vector<Case> chunk_cases = {
      {"2h hd8 g1 N16 k4", 2, 8, 1, 16, 4, true, 1e-3, 0.0},
      {"6h hd24 g3 N40 k3 dt-clamped", 6, 24, 3, 40, 3, true, 0.3, 1.5},
      {"3h hd5 g1 N200 k1", 3, 5, 1, 200, 1, true, 0.0, 0.0},
      {"4h hd40 g2 N256 k4", 4, 40, 2, 256, 4, true, 1e-3, 0.0},
      {"2h hd64 g2 N128 k2", 2, 64, 2, 128, 2, false, 1e-3, 0.0},
  };
  for (const Case& c : chunk_cases) {
    run_part(kCheck, "chunked " + c.name + " bf16", [&] { check_chunked<bf16>(c, seed); });
    seed += 100;
  }
  run_part(kCheck, "chunked " + chunk_cases[1].name + " f16", [&] { check_chunked<f16>(chunk_cases[1], seed); });
  run_part(kCheck, "chunked " + chunk_cases[4].name + " A=-40 f16",
           [&] { check_chunked<f16>(chunk_cases[4], seed + 100, true); });
  run_part(kCheck, "chunked " + chunk_cases[3].name + " A=-40 bf16",
           [&] { check_chunked<bf16>(chunk_cases[3], seed + 200, true); });
  seed += 300;
  run_part(kCheck, "long " + cases[5].name + " bf16", [&] { check_long<bf16>(cases[5], seed); });
#if SPARK_CUDA_EMU
  run_part(kCheck, "bytes prefill 4h hd64 N128", [] {
    check_prefill_bytes({"4h hd64 g2 N128", 4, 64, 2, 128, 4, true, 1e-3, 0.0}, 2, 300);
  });
  run_part(kCheck, "bytes prefill Nemotron-3-Nano", [] {
    check_prefill_bytes({"64h hd64 g8 N128 (Nemotron-3-Nano)", 64, 64, 8, 128, 4, true, 1e-3, 0.0}, 1, 300);
  });
  run_part(kCheck, "bytes decode 4h hd64 N128", [] {
    check_decode_bytes({"4h hd64 g2 N128", 4, 64, 2, 128, 4, true, 1e-3, 0.0}, 4);
  });
  run_part(kCheck, "bytes decode Nemotron-3-Nano", [] {
    check_decode_bytes({"64h hd64 g8 N128 (Nemotron-3-Nano)", 64, 64, 8, 128, 4, true, 1e-3, 0.0}, 2);
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
  return spark::gpu_check::run_main("mamba2", [] { spark::gpu_check::run(); });
}
