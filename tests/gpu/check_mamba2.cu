// check_mamba2.cu — checks the Mamba-2 token mixer on CUDA (mamba2_mix) against
// cpu::mamba2, in both compute types: mixed batches (fresh prefills into dirty slots,
// decodes and prefill chunks continuing a state, a padding sequence, a sequence without
// rows, rows past the last sequence) over three calls, the last as a captured graph of
// programmatic launches; tiny shapes (partial row tiles and state columns, conv_kernel 1
// and 3, no conv bias, both dt clamps, state columns past 32 a lane) and Nemotron-3-Nano's
// per-layer shape (64 heads of 64, 8 groups, state 128, conv 4); long prefills (many
// steps of the recurrence) continued by more. Also the bytes a decode call reads, beside
// their formula (emulator only).
#include <algorithm>
#include <cmath>
#include <cstdint>
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
template <typename T>
void run_call(const Case& c, Layer& L, Pool& pool, const std::vector<Seq>& seqs, int32_t extra_rows, uint64_t seed,
              bool graph, const std::string& label) {
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
    cuda::mamba2_mix<T>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), r.num_seqs, tokens, d_proj.get(),
                        d_out.get(), stream, programmatic);
  });

  const std::string what = call_name<T>(c.name, label, seqs, extra_rows);
  check_out(kCheck, what, want, d_out, I);
  check_states(kCheck, what, pool, before, states.written, m.conv_dim() * (m.conv_kernel - 1), kStateLimit,
               kStateLimit);
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

// Long prefills beside a decode and a padding sequence, then continued by a second prefill
// chunk and a decode: many steps of the recurrence in one call.
template <typename T>
void check_long(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  Pool pool(L.spec.state_values(), seed + 10);
  run_call<T>(c, L, pool, {{0, 0, 70}, {1, 0, 1}, {-1, 0, 5}, {2, 0, 33}}, 0, seed + 20, false, "long 1");
  run_call<T>(c, L, pool, {{0, 70, 40}, {2, 33, 1}, {1, 1, 17}}, 2, seed + 30, true, "long 2 graph");
}

// The bytes a decode call of B sequences (one row each, continuing their states) must
// move in this design: per sequence the state matrices H hd N 4 and the conv state
// C (K-1) 4, read and written; proj's x|B|C C 4 read and written by the conv, then x
// inner 4, the group's B and C 2 G N 4 and dt H 4 read and y inner 4 written by the state
// update; y and z 2 inner 4 read and out inner 2 written by the norm. Per call the conv
// weights C K 4 and bias C 4, A, D and dt_bias 3 H 4, the norm weight inner 4.
DecodeBytes decode_bytes(const ModelSpec::Mamba2& m, int64_t B) {
  const double C = double(m.conv_dim()), I = double(m.inner()), H = double(m.num_heads), K = double(m.conv_kernel),
               GN = double(m.n_groups) * double(m.state_size);
  const double matrices = H * double(m.head_dim) * double(m.state_size);
  const double per_seq_read = 4.0 * (matrices + C * (K - 1) + C + I + 2 * GN + H + 2 * I);
  const double per_call_read = 4.0 * (C * K + (m.conv_bias ? C : 0.0) + 3 * H + I);
  const double per_seq_written = 4.0 * (matrices + C * (K - 1) + C + I) + 2.0 * I;
  return {double(B) * per_seq_read + per_call_read, double(B) * per_seq_written};
}

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
  const Rows r = decode_rows(B, [B](int64_t s) { return (s * 3 + 1) % B; }, 7, 13);
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
    const Rows r = decode_rows(B, [](int64_t s) { return s; }, 100, 1);
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
#if SPARK_CUDA_EMU
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
