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
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cpu/mamba2.h"
#include "engine/backend/cuda/mamba2.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
constexpr const char* kCheck = "mamba2";
// f32 state and f32 arithmetic on both sides; only the summation order differs.
constexpr double kStateLimit = 1e-4;

void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

struct Case {
  std::string name;
  int32_t num_heads, head_dim, n_groups, state_size, conv_kernel;
  bool conv_bias;
  double dt_min, dt_max;
};

// A row-major f32 matrix as the CPU backend's weight Tensor.
Tensor f32_tensor(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Tensor t;
  t.name = "w";
  t.dtype = DType::F32;
  t.shape = {rows, cols};
  t.data = data.data();
  t.nbytes = data.size() * sizeof(float);
  return t;
}

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

struct Seq {
  int32_t slot;      // -1: padding
  int32_t position;  // of its first row
  int32_t rows;
};

// The slot pool: two recurrent layers a slot, this one second at an offset that is not a
// multiple of 4 floats, so nothing may assume aligned states.
struct Pool {
  int64_t state_values, layer_offset, slot_stride;
  int32_t num_slots = 8;
  std::vector<float> host;  // the CPU side's states (and the expected device contents)
  DeviceArray<float> device;
  explicit Pool(int64_t sv, uint64_t seed)
      : state_values(sv),
        layer_offset(sv + 5),
        slot_stride(2 * sv + 7),
        host(random_floats(size_t(8 * (2 * sv + 7)), seed, -1.0f, 1.0f)),
        device(host) {}
  float* state(int32_t slot) { return host.data() + slot * slot_stride + layer_offset; }
};

std::string seq_list(const std::vector<Seq>& seqs) {
  std::string s;
  for (const Seq& q : seqs) {
    if (!s.empty()) s += ",";
    s += q.slot < 0 ? std::string("pad") : std::to_string(q.rows) + "@" + std::to_string(q.position);
  }
  return s;
}

// One call on both sides; rows past the sequences: `extra_rows`. in_proj's output is
// random, with one dt value past softplus's threshold (20).
template <typename T>
void run_call(const Case& c, Layer& L, Pool& pool, const std::vector<Seq>& seqs, int32_t extra_rows, uint64_t seed,
              bool graph, const std::string& label) {
  const ModelSpec::Mamba2& m = L.spec;
  const int64_t I = m.inner(), C = m.conv_dim(), H = m.num_heads, P = m.in_proj_rows(), sv = m.state_values();
  std::vector<int32_t> query_start = {0}, positions;
  for (const Seq& s : seqs) {
    query_start.push_back(query_start.back() + s.rows);
    for (int32_t i = 0; i < s.rows; ++i) positions.push_back(s.position + i);
  }
  const int32_t seq_rows = query_start.back(), tokens = seq_rows + extra_rows, S = int32_t(seqs.size());
  for (int32_t i = 0; i < extra_rows; ++i) positions.push_back(0);

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
  if (seqs.size() > 1 && seqs[1].rows > 0) proj[size_t(query_start[1] * P + I + C + H - 1)] = 24.0f;

  // CPU: fresh sequences start from zeros; a padding sequence gets a throwaway state.
  std::vector<float> throwaway(size_t(sv), 0.0f);
  std::vector<float*> states;
  std::vector<bool> written(size_t(pool.num_slots), false);
  for (const Seq& s : seqs) {
    if (s.slot < 0) {
      states.push_back(throwaway.data());
      continue;
    }
    if (s.rows > 0 && s.position == 0) std::fill_n(pool.state(s.slot), sv, 0.0f);
    if (s.rows > 0) written[size_t(s.slot)] = true;
    states.push_back(pool.state(s.slot));
  }
  Batch batch;
  batch.token_ids.assign(size_t(seq_rows), 1);
  batch.positions.assign(positions.begin(), positions.begin() + seq_rows);
  batch.query_start = query_start;
  ThreadPool threads(2);
  cpu::Mamba2Scratch scratch;
  std::vector<float> cpu_out(size_t(seq_rows * L.hidden));
  cpu::mamba2(threads, m, L.cpu_w, L.shape.eps, batch, states, proj.data(), scratch, cpu_out.data());
  std::vector<float> want(size_t(tokens * I), 0.0f);
  std::vector<bool> zero_row(size_t(tokens), true);
  for (int32_t s = 0; s < S; ++s)
    for (int32_t t = query_start[size_t(s)]; t < query_start[size_t(s) + 1]; ++t)
      if (seqs[size_t(s)].slot >= 0) {
        zero_row[size_t(t)] = false;
        std::copy_n(cpu_out.begin() + t * L.hidden, I, want.begin() + t * I);
      }

  // Device.
  const std::vector<float> before = pool.device.download();
  std::vector<int32_t> slots;
  for (const Seq& s : seqs) slots.push_back(s.slot);
  DeviceArray<int32_t> d_qs(query_start), d_pos(positions), d_slots(slots);
  DeviceArray<float> d_proj(proj);
  DeviceArray<T> d_out(size_t(tokens * I));
  d_out.poison();
  const cuda::Mamba2States st{pool.device.get(), pool.slot_stride, pool.layer_offset, d_slots.get()};
  auto launch = [&](cudaStream_t stream, bool programmatic) {
    cuda::mamba2_mix<T>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), S, tokens, d_proj.get(), d_out.get(), stream,
                        programmatic);
  };
  if (graph) {  // capturable: no sync, allocation or host read inside; programmatic launches
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    launch(stream, true);
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaStreamDestroy(stream));
  } else {
    launch(nullptr, false);
  }
  sync();

  const std::string what = c.name + " " + half_name<T>() + " " + label + " [" + seq_list(seqs) +
                           (extra_rows ? "+" + std::to_string(extra_rows) + " spare" : "") + "]";
  const std::vector<float> got = from_half(d_out.download());
  std::vector<float> want_live, got_live;
  int64_t nonzero = 0;
  for (int32_t t = 0; t < tokens; ++t) {
    const auto w0 = want.cbegin() + t * I, g0 = got.cbegin() + t * I;
    if (zero_row[size_t(t)])
      nonzero += std::count_if(g0, g0 + I, [](float v) { return v != 0.0f; });
    else {
      want_live.insert(want_live.end(), w0, w0 + I);
      got_live.insert(got_live.end(), g0, g0 + I);
    }
  }
  error_row(kCheck, what + ": out", rel_error(want_live, got_live), half_limit<T>());
  if (nonzero || std::count(zero_row.begin(), zero_row.end(), true))
    row(kCheck, what + ": padding and spare rows zero", std::to_string(nonzero) + " nonzero", "0", nonzero == 0);

  // States: the written slots' conv and matrix parts within the limit, every other float
  // of the pool (other slots, the other layer, slots of padding or row-less sequences)
  // bit-identical to what it was. Each side continues from its own states, as a server would.
  const std::vector<float> dev = pool.device.download();
  const int64_t conv_values = m.conv_dim() * (m.conv_kernel - 1);
  std::vector<float> conv_want, conv_got, mat_want, mat_got;
  int64_t changed = 0;
  for (int32_t slot = 0; slot < pool.num_slots; ++slot)
    for (int64_t i = 0; i < pool.slot_stride; ++i) {
      const size_t at = size_t(slot * pool.slot_stride + i);
      const int64_t in_layer = i - pool.layer_offset;
      if (written[size_t(slot)] && in_layer >= 0 && in_layer < sv) {
        (in_layer < conv_values ? conv_want : mat_want).push_back(pool.host[at]);
        (in_layer < conv_values ? conv_got : mat_got).push_back(dev[at]);
      } else {
        changed += std::memcmp(&before[at], &dev[at], sizeof(float)) != 0;
      }
    }
  if (!conv_want.empty()) error_row(kCheck, what + ": conv states", rel_error(conv_want, conv_got), kStateLimit);
  error_row(kCheck, what + ": recurrent states", rel_error(mat_want, mat_got), kStateLimit);
  row(kCheck, what + ": other state untouched", std::to_string(changed) + " floats changed", "0", changed == 0);
}

template <typename T>
void check_case(const Case& c, uint64_t seed) {
  Layer L(c, seed);
  Pool pool(L.spec.state_values(), seed + 10);
  // An earlier call leaves states in slots 6 and 1 (both from position 0, dirty slots).
  run_call<T>(c, L, pool, {{6, 0, 3}, {1, 0, 1}}, 0, seed + 20, false, "call 1");
  // The mixed batch: a fresh prefill into dirty slot 5, decodes and prefill chunks
  // continuing call 1's states and random ones (slots 3, 0), a padding sequence.
  run_call<T>(c, L, pool, {{5, 0, 5}, {6, 3, 1}, {-1, 0, 1}, {1, 1, 4}, {3, 11, 1}, {0, 40, 2}}, 0, seed + 30, false,
              "call 2");
  // Every state continues; slot 2 has a sequence without rows (its state must stay), one
  // spare row past the last sequence; as a graph of programmatic launches.
  run_call<T>(c, L, pool, {{0, 42, 1}, {3, 12, 1}, {-1, 0, 1}, {6, 4, 2}, {2, 9, 0}, {1, 5, 1}, {5, 5, 3}}, 1,
              seed + 40, true, "call 3 graph");
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
struct DecodeBytes {
  double read, written;
};
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
  std::vector<int32_t> slots(static_cast<size_t>(B)), query_start(size_t(B + 1)), positions(static_cast<size_t>(B));
  for (int64_t s = 0; s < B; ++s) {
    slots[size_t(s)] = int32_t((s * 3 + 1) % B);  // a permutation: every slot once
    query_start[size_t(s + 1)] = int32_t(s + 1);
    positions[size_t(s)] = int32_t(7 + 13 * s);
  }
  DeviceArray<float> states(random_floats(size_t(B * sv), 902));
  DeviceArray<int32_t> d_slots(slots), d_qs(query_start), d_pos(positions);
  DeviceArray<float> proj(random_floats(size_t(B * P), 903));
  DeviceArray<bf16> out(size_t(B * I));
  ::emu::global_reads_begin();
  cuda::mamba2_mix<bf16>(L.shape, L.device(), {states.get(), sv, 0, d_slots.get()}, d_qs.get(), d_pos.get(), int32_t(B),
                         int32_t(B), proj.get(), out.get(), nullptr);
  sync();
  const double reads = double(::emu::global_reads_end().total());
  const DecodeBytes want = decode_bytes(m, B);
  const double ratio = reads / want.read;
  const std::string what = "bytes decode b" + std::to_string(B) + " " + c.name + " bf16";
  row(kCheck, what + ": read", fmt("%.4f", ratio) + fmt(" (%.0f KiB)", reads / 1024),
      fmt("1 .. 1.01 of %.0f KiB", want.read / 1024), ratio >= 1.0 && ratio <= 1.01);
  const double matrix_bytes = 2.0 * double(B) * 4.0 * double(matrices);
  info(kCheck, what + ": written (formula)", fmt("%.0f KiB", want.written / 1024),
       fmt("state matrices %.1f%% of read + written", 100.0 * matrix_bytes / (want.read + want.written)));
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
    const double moved = bytes.read + bytes.written;
    const int copies = int(std::clamp(std::ceil(150e6 / (double(B) * sv * 4)), 1.0, 64.0));
    std::vector<int32_t> slots(static_cast<size_t>(B)), query_start(size_t(B + 1)), positions(static_cast<size_t>(B));
    for (int64_t s = 0; s < B; ++s) {
      slots[size_t(s)] = int32_t(s);
      query_start[size_t(s + 1)] = int32_t(s + 1);
      positions[size_t(s)] = int32_t(100 + s);
    }
    DeviceArray<float> states(random_floats(size_t(B * copies * sv), 951, -0.1f, 0.1f));
    DeviceArray<int32_t> d_slots(slots), d_qs(query_start), d_pos(positions);
    DeviceArray<float> proj(random_floats(size_t(B * P), 952));
    DeviceArray<bf16> out(size_t(B * I));
    int it = 0;
    const double ms = time_ms([&] {
      const cuda::Mamba2States st{states.get(), copies * sv, (it++ % copies) * sv, d_slots.get()};
      // proj is overwritten in place each run: its contents do not change the time.
      cuda::mamba2_mix<bf16>(L.shape, L.device(), st, d_qs.get(), d_pos.get(), int32_t(B), int32_t(B), proj.get(),
                             out.get(), nullptr);
    });
    info(kCheck, "bench decode b" + std::to_string(B) + " " + c.name + " bf16",
         fmt("%.1f us", ms * 1e3) + fmt(", %.0f GB/s", moved / (ms * 1e-3) / 1e9),
         fmt("%.1f MB moved, ", moved / 1e6) + fmt("floor %.1f us at copy bandwidth", moved / (copy_gbs * 1e9) * 1e6));
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
