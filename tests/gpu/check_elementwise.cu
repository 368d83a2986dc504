// check_elementwise.cu — checks the element-wise CUDA kernels (embedding gather, an encoder's
// position rows, add + RMSNorm, an encoder's add + LayerNorm, qkv bias/norm/RoPE + paged KV
// write, SwiGLU, squared ReLU, biased GELU, the sigmoid output gates) against
// the CPU reference or a host computation, in both compute types (bf16 and f16), and times
// them at Llama-3.1-8B shapes. Also the pipeline stage boundary's f32 <-> 16-bit conversions.
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/boundary.h"
#include "engine/backend/cuda/embedding.h"
#include "engine/backend/cuda/output_gate.h"
#include "engine/backend/cuda/rms_norm.h"
#include "engine/backend/cuda/rope_kv.h"
#include "engine/backend/cuda/swiglu.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
constexpr const char* kCheck = "elementwise";
// f16 has 3 more significand bits than bf16, so the bf16 limit holds for both.
constexpr double kF32Limit = 1e-5, kFp8Limit = 7e-2;

void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

// Appended to row names: bf16 rows keep the names they had before f16 existed.
template <typename T>
std::string tag() {
  return std::is_same_v<T, f16> ? " f16" : "";
}
// The 16-bit KV cache dtype that holds T.
template <typename T>
constexpr cuda::KvDtype kv_dtype_of() {
  return std::is_same_v<T, f16> ? cuda::KvDtype::F16 : cuda::KvDtype::BF16;
}

std::string shape(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// True when every byte still holds the poison (0xFF) written before the launch.
template <typename T>
bool all_poison(const T* p, size_t n) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return std::all_of(b, b + n * sizeof(T), [](uint8_t x) { return x == 0xFF; });
}

// ---- embedding ------------------------------------------------------------------------

template <typename T>
void check_embedding(int32_t hidden) {
  const int64_t vocab = 1000;
  const std::vector<int32_t> ids = {0, 999, 1000, 17, -1, 512, INT32_MAX, 3, 998};  // 3 bad ids
  const int32_t n = int32_t(ids.size());
  const std::vector<float> table = round_half<T>(random_floats(size_t(vocab * hidden), 11 + hidden));
  DeviceArray<T> d_table(to_half<T>(table));
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_out(size_t(n) * hidden);
  d_out.poison();
  cuda::embedding_gather(d_ids.get(), n, d_table.get(), vocab, hidden, d_out.get(), nullptr);
  sync();

  std::vector<float> ref(size_t(n) * hidden, 0.0f);
  for (int32_t t = 0; t < n; ++t)
    if (ids[size_t(t)] >= 0 && ids[size_t(t)] < vocab)
      std::copy_n(table.begin() + int64_t(ids[size_t(t)]) * hidden, hidden, ref.begin() + int64_t(t) * hidden);
  error_row(kCheck, "embedding " + shape(n, hidden) + tag<T>() + " (3 bad ids -> 0)", rel_error(ref, d_out.download()),
            kF32Limit);
}

// An encoder's position rows plus token type 0 (f32 tables), from positions offset by 2 as
// RoBERTa numbers them; positions past the table give type 0 alone (the host refuses them first).
void check_position_rows(int32_t hidden, bool with_type) {
  const int64_t table_rows = 66, offset = 2;
  const std::vector<int32_t> positions = {0, 1, 63, 7, 64, -3, 5};  // 2 bad positions
  const int32_t n = int32_t(positions.size());
  const std::vector<float> table = random_floats(size_t(table_rows * hidden), 41 + hidden);
  const std::vector<float> type0 = random_floats(size_t(hidden), 42 + hidden);
  DeviceArray<float> d_table(table), d_type(type0), d_out(size_t(n) * hidden);
  DeviceArray<int32_t> d_pos(positions);
  d_out.poison();
  cuda::encoder_position_rows(d_pos.get(), n, d_table.get(), offset, table_rows, with_type ? d_type.get() : nullptr,
                              hidden, d_out.get(), nullptr);
  sync();
  std::vector<float> ref(size_t(n) * hidden);
  for (int32_t t = 0; t < n; ++t) {
    const int64_t r = offset + positions[size_t(t)];
    for (int32_t i = 0; i < hidden; ++i)
      ref[size_t(t) * hidden + i] =
          (r >= 0 && r < table_rows ? table[size_t(r * hidden + i)] : 0.0f) + (with_type ? type0[size_t(i)] : 0.0f);
  }
  error_row(kCheck, "encoder position rows " + shape(n, hidden) + (with_type ? " + type 0" : "") + " (2 bad positions)",
            rel_error(ref, d_out.download()), 0.0);
}

// ---- add + RMSNorm ----------------------------------------------------------------------

template <typename T>
void check_add_rms_norm(int32_t rows, int32_t hidden, bool with_delta, bool with_out, uint64_t seed) {
  const float eps = 1e-5f;
  const size_t n = size_t(rows) * hidden;
  const std::vector<float> x0 = random_floats(n, seed, -2.0f, 2.0f);
  const std::vector<float> delta = random_floats(n, seed + 1);
  const std::vector<float> weight = random_floats(size_t(hidden), seed + 2, 0.5f, 1.5f);
  DeviceArray<float> d_x(x0), d_w(weight), d_delta(delta);
  DeviceArray<T> d_out(n);
  d_out.poison();
  cuda::add_rms_norm(d_x.get(), with_delta ? d_delta.get() : nullptr, d_w.get(), rows, hidden, eps,
                     with_out ? d_out.get() : nullptr, nullptr);
  sync();

  std::vector<float> x_ref = x0, out_ref(n);
  if (with_delta)
    for (size_t i = 0; i < n; ++i) x_ref[i] += delta[i];
  for (int32_t r = 0; r < rows; ++r)
    cpu::rms_norm(x_ref.data() + int64_t(r) * hidden, weight.data(), hidden, eps, out_ref.data() + int64_t(r) * hidden);

  const std::string what = std::string("add_rms_norm ") + shape(rows, hidden) + tag<T>() +
                           (with_delta ? "" : " no delta") + (with_out ? "" : " no out");
  error_row(kCheck, what + ": x", rel_error(x_ref, d_x.download()), kF32Limit);
  if (with_out) {
    error_row(kCheck, what + ": out", rel_error(out_ref, from_half(d_out.download())), half_limit<T>());
  } else {
    const std::vector<T> got = d_out.download();
    row(kCheck, what + ": out untouched", "poison kept", "all", all_poison(got.data(), got.size()));
  }
}

template <typename T>
void check_rms_norm_rows(int32_t hidden) {
  const float eps = 1e-6f;
  const int32_t x_rows = 50;
  const std::vector<int32_t> row_ids = {49, 0, 17, 17, 3};
  const int32_t rows = int32_t(row_ids.size());
  const std::vector<float> x = random_floats(size_t(x_rows) * hidden, 31, -3.0f, 3.0f);
  const std::vector<float> weight = random_floats(size_t(hidden), 32, 0.5f, 1.5f);
  DeviceArray<float> d_x(x), d_w(weight);
  DeviceArray<int32_t> d_ids(row_ids);
  DeviceArray<T> d_out(size_t(rows) * hidden);
  d_out.poison();
  cuda::rms_norm_rows(d_x.get(), d_ids.get(), rows, d_w.get(), hidden, eps, d_out.get(), nullptr);
  sync();

  std::vector<float> ref(size_t(rows) * hidden);
  for (int32_t r = 0; r < rows; ++r)
    cpu::rms_norm(x.data() + int64_t(row_ids[size_t(r)]) * hidden, weight.data(), hidden, eps,
                  ref.data() + int64_t(r) * hidden);
  const std::string what = "rms_norm_rows 5 of " + shape(x_rows, hidden) + tag<T>();
  error_row(kCheck, what, rel_error(ref, from_half(d_out.download())), half_limit<T>());
  error_row(kCheck, what + ": x unchanged", rel_error(x, d_x.download()), 0.0);
}

// ---- qkv bias / norm / RoPE / KV write ---------------------------------------------------

struct RopeCase {
  std::string name;
  int32_t num_heads, num_kv_heads, head_dim;
  bool bias, qk_norm;
  std::string scaling;  // "", "llama3", "linear"
  double theta;
  cuda::KvDtype dtype;     // FP8, or the compute type's own (BF16 for bf16, F16 for f16)
  int32_t rotary_dim = 0;  // 0: the whole head (ModelSpec::rotary_dim)
  int32_t extra_cols = 0;  // qkv rows carry this many more values (NaN) after v: qkv_stride
  bool no_rope = false;    // Nemotron-H: attention without RoPE
  bool k_eq_v = false;     // Gemma 4's full layers: no v rows, the values are the keys as projected, then normed
};

ModelSpec rope_spec(const RopeCase& c) {
  ModelSpec spec;
  spec.head_dim = c.head_dim;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.rope_theta = c.theta;
  spec.rotary_dim = c.rotary_dim;
  spec.rope_scaling.type = c.scaling;
  if (c.scaling == "llama3") {
    spec.rope_scaling.factor = 8.0;
    spec.rope_scaling.low_freq_factor = 1.0;
    spec.rope_scaling.high_freq_factor = 4.0;
    spec.rope_scaling.original_max_position_embeddings = 8192;
  } else if (c.scaling == "linear") {
    spec.rope_scaling.factor = 4.0;
  } else if (c.scaling == "proportional") {  // Gemma 4's full layers: a quarter of the pairs turn
    spec.rope_scaling.rotated_fraction = 0.25;
  }
  return spec;
}

// Fisher-Yates over all slots, then every 5th row gets -1 (a padded row: nothing written).
std::vector<int32_t> make_slots(int32_t rows, int64_t num_slots, uint64_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t i = num_slots - 1; i > 0; --i)
    std::swap(all[size_t(i)], all[size_t(splitmix64(seed + uint64_t(i)) % uint64_t(i + 1))]);
  std::vector<int32_t> slots(all.begin(), all.begin() + rows);
  for (int32_t t = 4; t < rows; t += 5) slots[size_t(t)] = -1;
  return slots;
}

std::vector<int32_t> make_positions(int32_t rows, uint64_t seed, int32_t max_pos) {
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int32_t t = 0; t < rows; ++t) pos[size_t(t)] = int32_t(splitmix64(seed + uint64_t(t)) % uint64_t(max_pos + 1));
  pos[0] = 0;
  if (rows > 1) pos[1] = max_pos;
  return pos;
}

float fp8_value(uint8_t byte) {
  __nv_fp8_e4m3 f;
  f.__x = byte;
  return static_cast<float>(f);
}

template <typename T>
void check_rope(const RopeCase& c, uint64_t seed) {
  const int32_t rows = 37, nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
  const int32_t heads = nh + (c.k_eq_v ? 1 : 2) * nkv;  // in a qkv row
  const int64_t width = int64_t(heads) * hd, stride = width + c.extra_cols;
  const float eps = 1e-6f;
  const bool fp8 = c.dtype == cuda::KvDtype::FP8;
  const ModelSpec spec = rope_spec(c);
  const cpu::Rope rope(spec);

  // The columns past v hold NaN: any of them read into q, k or v makes its row non-finite.
  std::vector<float> qkv = round_half<T>(random_floats(size_t(rows * stride), seed, -2.0f, 2.0f));
  for (int32_t t = 0; t < rows; ++t) std::fill_n(qkv.begin() + t * stride + width, c.extra_cols, NAN);
  const std::vector<float> bias = random_floats(size_t(heads) * hd, seed + 1, -0.5f, 0.5f);
  const std::vector<float> q_norm = random_floats(size_t(hd), seed + 2, 0.5f, 1.5f);
  const std::vector<float> k_norm = random_floats(size_t(hd), seed + 3, 0.5f, 1.5f);
  const std::vector<int32_t> positions = make_positions(rows, seed + 4, 100000);
  cuda::KvShape kv;
  kv.dtype = c.dtype;
  kv.block_size = 16;
  kv.num_kv_heads = nkv;
  kv.head_dim = hd;
  kv.num_slots = 3 * 16;  // more slots than rows: most stay untouched
  const std::vector<int32_t> slots = make_slots(rows, kv.num_slots, seed + 5);
  const size_t cache_elems = size_t(kv.num_slots) * nkv * hd, scale_elems = size_t(kv.num_slots) * nkv;

  DeviceArray<T> d_qkv(to_half<T>(qkv)), d_q(size_t(rows) * nh * hd);
  DeviceArray<float> d_bias(bias), d_qn(q_norm), d_kn(k_norm), d_inv_freq(rope.inv_freq());
  DeviceArray<int32_t> d_pos(positions), d_slots(slots);
  DeviceArray<T> k16(fp8 ? 0 : cache_elems), v16(fp8 ? 0 : cache_elems);
  DeviceArray<uint8_t> k8(fp8 ? cache_elems : 0), v8(fp8 ? cache_elems : 0);
  DeviceArray<uint8_t> k_scale(fp8 ? scale_elems : 0), v_scale(fp8 ? scale_elems : 0);
  d_q.poison();
  cuda::KvLayer layer;
  if (fp8) {
    k8.poison();
    v8.poison();
    k_scale.poison();
    v_scale.poison();
    layer = {k8.get(), v8.get(), k_scale.get(), v_scale.get()};
  } else {
    k16.poison();
    v16.poison();
    layer = {k16.get(), v16.get(), nullptr, nullptr};
  }
  cuda::RopeArgs rope_args;
  rope_args.inv_freq = d_inv_freq.get();
  rope_args.position_scale = rope.position_scale();
  rope_args.rotary_dim = c.rotary_dim;
  rope_args.rotates = !c.no_rope;
  cuda::qkv_rope_kv_write(d_qkv.get(), c.bias ? d_bias.get() : nullptr, c.qk_norm ? d_qn.get() : nullptr,
                          c.qk_norm ? d_kn.get() : nullptr, eps, d_pos.get(), d_slots.get(), rows, nh,
                          c.extra_cols ? int32_t(stride) : 0, rope_args, kv, layer, d_q.get(), nullptr, false,
                          {c.k_eq_v, c.k_eq_v});
  sync();

  // The CPU backend's order (run_layer): bias, per-head norm, RoPE.
  std::vector<float> q_ref(size_t(rows) * nh * hd), k_ref(size_t(rows) * nkv * hd), v_ref(size_t(rows) * nkv * hd);
  for (int32_t t = 0; t < rows; ++t) {
    std::vector<float> r(qkv.begin() + t * stride, qkv.begin() + t * stride + width);
    if (c.bias)
      for (size_t i = 0; i < r.size(); ++i) r[i] += bias[i];
    float* q = r.data();
    float* k = q + int64_t(nh) * hd;
    std::vector<float> k_values(k, k + int64_t(nkv) * hd);  // the keys as projected
    float* v = c.k_eq_v ? k_values.data() : k + int64_t(nkv) * hd;
    if (c.k_eq_v) {
      const std::vector<float> ones(size_t(hd), 1.0f);
      for (int32_t h = 0; h < nkv; ++h) cpu::rms_norm(v + h * hd, ones.data(), hd, eps, v + h * hd);
    }
    if (c.qk_norm) {
      for (int32_t h = 0; h < nh; ++h) cpu::rms_norm(q + h * hd, q_norm.data(), hd, eps, q + h * hd);
      for (int32_t h = 0; h < nkv; ++h) cpu::rms_norm(k + h * hd, k_norm.data(), hd, eps, k + h * hd);
    }
    if (!c.no_rope) {
      rope.apply(q, nh, positions[size_t(t)]);
      rope.apply(k, nkv, positions[size_t(t)]);
    }
    std::copy_n(q, nh * hd, q_ref.begin() + int64_t(t) * nh * hd);
    std::copy_n(k, nkv * hd, k_ref.begin() + int64_t(t) * nkv * hd);
    std::copy_n(v, nkv * hd, v_ref.begin() + int64_t(t) * nkv * hd);
  }

  const std::string what = "rope_kv " + c.name;
  error_row(kCheck, what + ": q", rel_error(q_ref, from_half(d_q.download())), half_limit<T>());

  // Written slots must match the reference; every other slot must keep its poison.
  std::vector<bool> written(size_t(kv.num_slots), false);
  for (int32_t s : slots)
    if (s >= 0) written[size_t(s)] = true;
  const size_t vec_elems = size_t(nkv) * hd;  // one slot, all kv heads
  int64_t touched = 0;
  if (!fp8) {
    const std::vector<float> k_got = from_half(k16.download()), v_got = from_half(v16.download());
    const std::vector<T> k_raw = k16.download(), v_raw = v16.download();
    std::vector<float> kr, kg, vr, vg;
    for (int32_t t = 0; t < rows; ++t) {
      const int32_t s = slots[size_t(t)];
      if (s < 0) continue;
      kr.insert(kr.end(), k_ref.begin() + int64_t(t) * vec_elems, k_ref.begin() + int64_t(t + 1) * vec_elems);
      vr.insert(vr.end(), v_ref.begin() + int64_t(t) * vec_elems, v_ref.begin() + int64_t(t + 1) * vec_elems);
      kg.insert(kg.end(), k_got.begin() + int64_t(s) * vec_elems, k_got.begin() + int64_t(s + 1) * vec_elems);
      vg.insert(vg.end(), v_got.begin() + int64_t(s) * vec_elems, v_got.begin() + int64_t(s + 1) * vec_elems);
    }
    error_row(kCheck, what + ": k cache", rel_error(kr, kg), half_limit<T>());
    error_row(kCheck, what + ": v cache", rel_error(vr, vg), half_limit<T>());
    for (int64_t s = 0; s < kv.num_slots; ++s)
      if (!written[size_t(s)])
        touched +=
            !all_poison(k_raw.data() + s * vec_elems, vec_elems) + !all_poison(v_raw.data() + s * vec_elems, vec_elems);
  } else {
    const std::vector<uint8_t> k_raw = k8.download(), v_raw = v8.download();
    const std::vector<uint8_t> ks = k_scale.download(), vs = v_scale.download();
    double worst = 0;
    int64_t loose_scales = 0;  // the scale must be the tightest power of two: max |e4m3| in [224, 448]
    for (int32_t t = 0; t < rows; ++t) {
      const int32_t s = slots[size_t(t)];
      if (s < 0) continue;
      for (int pass = 0; pass < 2; ++pass) {
        const std::vector<uint8_t>& raw = pass == 0 ? k_raw : v_raw;
        const std::vector<uint8_t>& scales = pass == 0 ? ks : vs;
        const std::vector<float>& ref = pass == 0 ? k_ref : v_ref;
        for (int32_t h = 0; h < nkv; ++h) {
          const size_t vec = size_t(s) * nkv + size_t(h);
          const float scale = std::ldexp(1.0f, int(scales[vec]) - 127);
          double diff = 0, amax = 0, qmax = 0;
          bool finite = true;
          for (int32_t i = 0; i < hd; ++i) {
            const float q = fp8_value(raw[vec * size_t(hd) + size_t(i)]);
            const float r = ref[(size_t(t) * nkv + size_t(h)) * size_t(hd) + size_t(i)];
            finite = finite && std::isfinite(q);
            diff = std::max(diff, std::fabs(double(q) * scale - r));
            amax = std::max(amax, std::fabs(double(r)));
            qmax = std::max(qmax, std::fabs(double(q)));
          }
          worst = std::max(worst, finite ? diff / amax : INFINITY);
          loose_scales += !(qmax >= 224.0 && qmax <= 448.0);
        }
      }
    }
    error_row(kCheck, what + ": k/v cache (per head)", worst, kFp8Limit);
    row(kCheck, what + ": scales tight", std::to_string(loose_scales) + " loose", "0", loose_scales == 0);
    for (int64_t s = 0; s < kv.num_slots; ++s)
      if (!written[size_t(s)])
        touched += !all_poison(k_raw.data() + s * vec_elems, vec_elems) +
                   !all_poison(v_raw.data() + s * vec_elems, vec_elems) +
                   !all_poison(ks.data() + s * nkv, size_t(nkv)) + !all_poison(vs.data() + s * nkv, size_t(nkv));
  }
  row(kCheck, what + ": other slots untouched", std::to_string(touched) + " touched", "0", touched == 0);
}

// ---- add + LayerNorm (encoders) -----------------------------------------------------------

// x = LayerNorm(x + (delta + delta_bias)) written to x (f32) and out (T). The rows carry a
// large common offset, which a one-pass variance would lose to cancellation.
template <typename T>
void check_add_layer_norm(int32_t rows, int32_t hidden, bool with_delta, bool with_bias, uint64_t seed) {
  const float eps = 1e-5f;
  const size_t n = size_t(rows) * hidden;
  std::vector<float> x0 = random_floats(n, seed, -2.0f, 2.0f);
  for (size_t i = 0; i < n; ++i) x0[i] += 30.0f;
  const std::vector<float> delta = random_floats(n, seed + 1);
  const std::vector<float> delta_bias = random_floats(size_t(hidden), seed + 2);
  const std::vector<float> weight = random_floats(size_t(hidden), seed + 3, 0.5f, 1.5f);
  const std::vector<float> bias = random_floats(size_t(hidden), seed + 4);
  DeviceArray<float> d_x(x0), d_delta(delta), d_delta_bias(delta_bias), d_w(weight), d_b(bias);
  DeviceArray<T> d_out(n);
  d_out.poison();
  cuda::add_layer_norm(d_x.get(), with_delta ? d_delta.get() : nullptr, with_bias ? d_delta_bias.get() : nullptr,
                       d_w.get(), d_b.get(), rows, hidden, eps, d_out.get(), nullptr);
  sync();
  std::vector<float> ref = x0;
  for (int32_t r = 0; r < rows; ++r) {
    float* row = ref.data() + int64_t(r) * hidden;
    for (int32_t i = 0; i < hidden; ++i)
      row[i] += (with_delta ? delta[size_t(r) * hidden + i] : 0.0f) + (with_bias ? delta_bias[size_t(i)] : 0.0f);
    cpu::layer_norm(row, weight.data(), bias.data(), hidden, eps, row);
  }
  const std::string what = "add_layer_norm " + shape(rows, hidden) + tag<T>() + (with_delta ? "" : " no delta") +
                           (with_bias ? " + bias" : "");
  error_row(kCheck, what + ": x", rel_error(ref, d_x.download()), kF32Limit);
  error_row(kCheck, what + ": out", rel_error(ref, from_half(d_out.download())), half_limit<T>());
}

// ---- SwiGLU -----------------------------------------------------------------------------

// spikes: some gate and up values of +-400, whose products (+-160000) pass FP16's 65504.
// FP16 stores saturate (from_f32 in common.cuh): there the output must be +-65504, not inf.
// gelu_tanh: Gemma's gelu_tanh(gate) * up, against cpu::gelu_tanh_mul.
template <typename T>
void check_swiglu(int32_t rows, int32_t inter, uint64_t seed, bool spikes = false, bool gelu_tanh = false) {
  std::vector<float> gate_up = round_half<T>(random_floats(size_t(rows) * 2 * inter, seed, -6.0f, 6.0f));
  if (spikes)
    for (int32_t t = 0; t < rows; ++t)
      for (int32_t i = t; i < inter; i += 5) {
        gate_up[size_t(t) * 2 * inter + size_t(i)] = 400.0f;
        gate_up[size_t(t) * 2 * inter + size_t(inter + i)] = i % 2 ? 400.0f : -400.0f;
      }
  DeviceArray<T> d_in(to_half<T>(gate_up)), d_out(size_t(rows) * inter);
  d_out.poison();
  cuda::swiglu(d_in.get(), rows, inter, d_out.get(), nullptr, false, gelu_tanh);
  sync();
  std::vector<float> ref(size_t(rows) * inter);
  for (int32_t t = 0; t < rows; ++t) {
    const float* g = gate_up.data() + int64_t(t) * 2 * inter;
    (gelu_tanh ? cpu::gelu_tanh_mul : cpu::silu_mul)(g, g + inter, inter, ref.data() + int64_t(t) * inter);
  }
  if constexpr (std::is_same_v<T, f16>)
    for (float& v : ref) v = std::clamp(v, -65504.0f, 65504.0f);
  error_row(kCheck, std::string(gelu_tanh ? "gelu-tanh gate " : "swiglu ") + shape(rows, inter) + tag<T>() +
                        (spikes ? " with outputs past 65504" : ""),
            rel_error(ref, from_half(d_out.download())), half_limit<T>());
}

// Encoders' biased exact GELU, in place on the up projection's rows: gelu(x + bias).
template <typename T>
void check_bias_gelu(int32_t rows, int32_t n, uint64_t seed) {
  const std::vector<float> x = round_half<T>(random_floats(size_t(rows) * n, seed, -6.0f, 6.0f));
  const std::vector<float> bias = random_floats(size_t(n), seed + 1);
  DeviceArray<T> d(to_half<T>(x));
  DeviceArray<float> d_bias(bias);
  cuda::bias_gelu(d.get(), d_bias.get(), rows, n, nullptr);
  sync();
  std::vector<float> ref(x.size());
  for (int32_t t = 0; t < rows; ++t) {
    float* row = ref.data() + int64_t(t) * n;
    for (int32_t i = 0; i < n; ++i) row[i] = x[size_t(t) * n + i] + bias[size_t(i)];
    cpu::gelu(row, n, row);
  }
  error_row(kCheck, "bias_gelu " + shape(rows, n) + tag<T>(), rel_error(ref, from_half(d.download())), half_limit<T>());
}

// Nemotron-H's squared ReLU, in place; FP16 saturates at 65504 as swiglu's stores do.
template <typename T>
void check_relu2(int64_t n, uint64_t seed) {
  const std::vector<float> x = round_half<T>(random_floats(size_t(n), seed, -300.0f, 300.0f));
  DeviceArray<T> d(to_half<T>(x));
  cuda::relu2(d.get(), n, nullptr);
  sync();
  std::vector<float> ref(x.size());
  cpu::relu2(x.data(), n, ref.data());
  if constexpr (std::is_same_v<T, f16>)
    for (float& v : ref) v = std::min(v, 65504.0f);
  error_row(kCheck, "relu2 n=" + std::to_string(n) + tag<T>(), rel_error(ref, from_half(d.download())), half_limit<T>());
}

// ---- sigmoid output gates (Qwen3.5/3.6, Qwen3-Next) --------------------------------------

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The gate is a slice of a wider fused row (columns gate_col .. gate_col + width of rows
// gate_stride apart), as when it trails q, k and v in one projection. Some gate values are
// +-100 (sigmoid exactly 1 and 0 in f32). attn has one more row, poisoned: it must stay so.
template <typename T>
void check_output_gate(int32_t rows, int32_t width, int32_t gate_col, int32_t gate_stride, uint64_t seed) {
  std::vector<float> proj = round_half<T>(random_floats(size_t(rows) * gate_stride, seed, -8.0f, 8.0f));
  for (int32_t t = 0; t < rows; ++t) {
    proj[size_t(t) * gate_stride + gate_col + size_t(t) % width] = -100.0f;
    proj[size_t(t) * gate_stride + gate_col + size_t(t * 7 + 3) % width] = 100.0f;
  }
  const std::vector<float> attn = round_half<T>(random_floats(size_t(rows) * width, seed + 1, -4.0f, 4.0f));
  DeviceArray<T> d_proj(to_half<T>(proj)), d_attn(size_t(rows + 1) * width);
  d_attn.poison();
  d_attn.upload(to_half<T>(attn));
  cuda::apply_output_gate(d_attn.get(), d_proj.get() + gate_col, gate_stride, rows, width, nullptr);
  sync();

  std::vector<float> ref(attn.size());
  for (int32_t t = 0; t < rows; ++t)
    for (int32_t i = 0; i < width; ++i)
      ref[size_t(t) * width + i] =
          float(attn[size_t(t) * width + i] * sigmoid_ref(proj[size_t(t) * gate_stride + gate_col + i]));
  const std::vector<T> got = d_attn.download();
  const std::vector<T> got_rows(got.begin(), got.begin() + int64_t(rows) * width);
  const bool vectors = width % 8 == 0 && gate_col % 8 == 0 && gate_stride % 8 == 0;
  const std::string what = "output_gate " + shape(rows, width) + " gate at col " + std::to_string(gate_col) + " of " +
                           std::to_string(gate_stride) + (vectors ? "" : " (single values)") + tag<T>();
  error_row(kCheck, what, rel_error(ref, from_half(got_rows)), half_limit<T>());
  row(kCheck, what + ": past the rows untouched", "checked", "poison kept",
      all_poison(got.data() + int64_t(rows) * width, size_t(width)));
}

// out += sigmoid(logit) * y in f32; the logit is column 1 of a [rows, logit_stride] matrix
// (column 0 of the next row when the stride is 1), some at +-100. out has one more row, poisoned.
// logit_stride 0: no logit, a gate of 1 (Nemotron-H's shared expert).
void check_gated_rows(int32_t rows, int32_t width, int32_t logit_stride, uint64_t seed) {
  const std::vector<float> out0 = random_floats(size_t(rows) * width, seed, -3.0f, 3.0f);
  const std::vector<float> y = random_floats(size_t(rows) * width, seed + 1, -3.0f, 3.0f);
  std::vector<float> logits = random_floats(size_t(rows) * std::max(logit_stride, 1) + 1, seed + 2, -6.0f, 6.0f);
  logits[1] = -100.0f;
  if (rows > 1) logits[1 + size_t(logit_stride)] = 100.0f;
  DeviceArray<float> d_out(size_t(rows + 1) * width), d_y(y), d_logits(logits);
  d_out.poison();
  d_out.upload(out0);
  const bool ungated = logit_stride == 0;
  cuda::add_gated_rows(d_out.get(), d_y.get(), ungated ? nullptr : d_logits.get() + 1, std::max(logit_stride, 1), rows,
                       width, nullptr);
  sync();

  std::vector<float> ref(out0.size());
  for (int32_t t = 0; t < rows; ++t) {
    const double g = ungated ? 1.0 : sigmoid_ref(logits[1 + size_t(t) * logit_stride]);
    for (int32_t i = 0; i < width; ++i) {
      const size_t k = size_t(t) * width + i;
      ref[k] = float(out0[k] + g * y[k]);
    }
  }
  const std::vector<float> got = d_out.download();
  const std::string what = "add_gated_rows " + shape(rows, width) +
                           (ungated ? " ungated" : " logit stride " + std::to_string(logit_stride)) +
                           (width % 4 == 0 ? "" : " (single values)");
  error_row(kCheck, what, rel_error(ref, std::vector<float>(got.begin(), got.begin() + int64_t(rows) * width)),
            kF32Limit);
  row(kCheck, what + ": past the rows untouched", "checked", "poison kept",
      all_poison(got.data() + int64_t(rows) * width, size_t(width)));
}

// ---- benchmarks (Llama-3.1-8B shapes) ----------------------------------------------------

constexpr int32_t kHidden = 4096, kInter = 14336, kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int64_t kVocab = 128256;

// Enough copies of a call's buffers that rotating through them moves ~3x the 50 MB L2;
// at small row counts the cap leaves them L2-resident (and launch-bound anyway).
int copies_for(double bytes) { return int(std::clamp(std::ceil(150e6 / bytes), 1.0, 16.0)); }

// ---- stage boundary -----------------------------------------------------------------------

// What a first stage sends must be the residual stream rounded to T (exactly what the
// host's conversion gives, round to nearest even; FP16 saturating), and what the next
// stage reads back must be those values exactly; nothing past n is written.
template <typename T>
void check_boundary(int32_t rows, int32_t hidden, uint64_t seed) {
  const size_t n = size_t(rows) * hidden;
  std::vector<float> x = random_floats(n, seed, -8.0f, 8.0f);
  x[0] = 1e6f;  // past FP16's range: saturates there
  x[1] = -1e6f;
  DeviceArray<float> d_x(x), d_back(n + 8);
  DeviceArray<T> d_half(n + 8);
  d_half.poison();
  d_back.poison();
  cuda::hidden_to_16bit(d_x.get(), int64_t(n), d_half.get(), nullptr);
  cuda::hidden_from_16bit(d_half.get(), int64_t(n), d_back.get(), nullptr);
  sync();
  const std::vector<T> half = d_half.download();
  const std::vector<T> want = to_half<T>(x);
  const std::vector<float> back = d_back.download();
  bool same = true;
  for (size_t i = 0; i < n; ++i)
    same = same && std::memcmp(&half[i], &want[i], sizeof(T)) == 0 && back[i] == from_half(std::vector<T>{want[i]})[0];
  row(kCheck, "stage boundary " + shape(rows, hidden) + tag<T>() + ": to 16-bit and back", same ? "bit-exact" : "differs",
      "bit-exact", same);
  row(kCheck, "stage boundary " + shape(rows, hidden) + tag<T>() + ": nothing past the rows", "checked", "poison kept",
      all_poison(half.data() + n, 8) && all_poison(back.data() + n, 8));
}

void report(const std::string& kernel, int32_t rows, double bytes, double ms) {
  info(kCheck, "bench " + kernel + " rows " + std::to_string(rows),
       fmt("%.1f us", ms * 1e3) + fmt(", %.0f GB/s", bytes / (ms * 1e-3) / 1e9), fmt("%.1f MB moved", bytes / 1e6));
}

void fill(void* p, size_t bytes, int value) { CUDA_CHECK(cudaMemset(p, value, bytes)); }

template <typename T>
void bench_all(const T* table) {
  for (int32_t rows : {1, 64, 2048}) {
    const int64_t rh = int64_t(rows) * kHidden;
    {  // embedding
      const double bytes = double(rh) * (2 + 4) + rows * 4.0;
      const int n = copies_for(bytes);
      std::vector<int32_t> ids(size_t(rows) * n);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(splitmix64(i + 77) % uint64_t(kVocab));
      DeviceArray<int32_t> d_ids(ids);
      DeviceArray<float> out(size_t(rh) * n);
      int it = 0;
      const double ms = time_ms([&] {
        const int c = it++ % n;
        cuda::embedding_gather(d_ids.get() + int64_t(c) * rows, rows, table, kVocab, kHidden, out.get() + c * rh,
                               nullptr);
      });
      report("embedding" + tag<T>(), rows, bytes, ms);
    }
    {  // add + norm, and the final norm of the same number of rows
      const double bytes = double(rh) * (4 + 4 + 4 + 2) + kHidden * 4.0;
      const int n = copies_for(bytes);
      DeviceArray<float> x(size_t(rh) * n), delta(size_t(rh) * n), w(random_floats(kHidden, 5, 0.5f, 1.5f));
      DeviceArray<T> out(size_t(rh) * n);
      fill(x.get(), x.size() * 4, 0x3F);  // ~0.75: finite values, content is irrelevant here
      fill(delta.get(), delta.size() * 4, 0x3C);
      int it = 0;
      double ms = time_ms([&] {
        const int c = it++ % n;
        cuda::add_rms_norm(x.get() + c * rh, delta.get() + c * rh, w.get(), rows, kHidden, 1e-5f, out.get() + c * rh,
                           nullptr);
      });
      report("add_rms_norm" + tag<T>(), rows, bytes, ms);
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::iota(ids.rbegin(), ids.rend(), 0);
      DeviceArray<int32_t> d_ids(ids);
      const double norm_bytes = double(rh) * (4 + 2) + kHidden * 4.0 + rows * 4.0;
      ms = time_ms([&] {
        const int c = it++ % n;
        cuda::rms_norm_rows(x.get() + c * rh, d_ids.get(), rows, w.get(), kHidden, 1e-5f, out.get() + c * rh, nullptr);
      });
      report("rms_norm_rows" + tag<T>(), rows, norm_bytes, ms);
    }
    for (cuda::KvDtype dtype : {kv_dtype_of<T>(), cuda::KvDtype::FP8}) {  // qkv rope + KV write
      const bool fp8 = dtype == cuda::KvDtype::FP8;
      const int64_t qkv_elems = int64_t(rows) * (kHeads + 2 * kKvHeads) * kHeadDim;
      const int64_t q_elems = int64_t(rows) * kHeads * kHeadDim, kv_elems = int64_t(rows) * kKvHeads * kHeadDim;
      const double bytes = qkv_elems * 2.0 + q_elems * 2.0 + 2.0 * kv_elems * (fp8 ? 1 : 2) +
                           (fp8 ? 2.0 * rows * kKvHeads : 0) + rows * 8.0;
      const int n = copies_for(bytes);
      ModelSpec spec;
      spec.head_dim = kHeadDim;
      spec.rope_theta = 500000.0;
      spec.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
      const cpu::Rope rope(spec);
      DeviceArray<float> inv_freq(rope.inv_freq());
      DeviceArray<T> qkv(size_t(qkv_elems) * n), q(size_t(q_elems) * n);
      fill(qkv.get(), qkv.size() * 2, 0x3C);
      cuda::KvShape kv{dtype, 16, kKvHeads, kHeadDim, int64_t(rows) * n};
      const size_t cache_bytes = size_t(kv.num_slots) * kKvHeads * kHeadDim * (fp8 ? 1 : 2);
      DeviceArray<uint8_t> k(cache_bytes), v(cache_bytes), ks(size_t(kv.num_slots) * kKvHeads),
          vs(size_t(kv.num_slots) * kKvHeads);
      std::vector<int32_t> slots(size_t(kv.num_slots));
      std::iota(slots.begin(), slots.end(), 0);
      DeviceArray<int32_t> d_slots(slots), d_pos(make_positions(int32_t(kv.num_slots), 9, 100000));
      const cuda::KvLayer layer{k.get(), v.get(), fp8 ? ks.get() : nullptr, fp8 ? vs.get() : nullptr};
      const cuda::RopeArgs args{inv_freq.get(), rope.position_scale()};
      int it = 0;
      const double ms = time_ms([&] {
        const int c = it++ % n;
        cuda::qkv_rope_kv_write(qkv.get() + c * qkv_elems, nullptr, nullptr, nullptr, 1e-5f,
                                d_pos.get() + int64_t(c) * rows, d_slots.get() + int64_t(c) * rows, rows, kHeads, 0,
                                args, kv, layer, q.get() + c * q_elems, nullptr);
      });
      const std::string cache = fp8 ? "fp8" + tag<T>() : std::is_same_v<T, f16> ? "f16" : "bf16";
      report("rope_kv " + cache, rows, bytes, ms);
    }
    {  // swiglu
      const int64_t ri = int64_t(rows) * kInter;
      const double bytes = ri * 6.0;
      const int n = copies_for(bytes);
      DeviceArray<T> in(size_t(ri) * 2 * n), out(size_t(ri) * n);
      fill(in.get(), in.size() * 2, 0x3C);
      int it = 0;
      const double ms = time_ms([&] {
        const int c = it++ % n;
        cuda::swiglu(in.get() + c * 2 * ri, rows, kInter, out.get() + c * ri, nullptr);
      });
      report("swiglu" + tag<T>(), rows, bytes, ms);
    }
  }
}

template <typename T>
void run_cases() {
  check_embedding<T>(576);
  check_embedding<T>(4096);

  check_add_rms_norm<T>(7, 4096, true, true, 101);
  check_add_rms_norm<T>(3, 576, true, true, 102);
  check_add_rms_norm<T>(5, 8192, true, true, 103);
  check_add_rms_norm<T>(6, 4096, false, true, 104);
  check_add_rms_norm<T>(4, 4096, true, false, 105);
  check_rms_norm_rows<T>(4096);
  check_rms_norm_rows<T>(896);
  check_add_layer_norm<T>(7, 1024, true, true, 111);  // BGE-M3's width
  check_add_layer_norm<T>(3, 32, true, false, 112);
  check_add_layer_norm<T>(5, 8192, false, false, 113);
  check_add_layer_norm<T>(2, 4104, true, true, 114);  // chunks not a multiple of the threads

  // Named by their bf16 form; for f16 a 16-bit cache becomes F16 ("... f16") and an FP8 one
  // is fed from f16 ("... fp8 f16").
  using cuda::KvDtype;
  const std::vector<RopeCase> cases = {
      {"llama hd128 32/8 llama3 bf16", 32, 8, 128, false, false, "llama3", 500000.0, KvDtype::BF16},
      {"llama hd128 32/8 llama3 fp8", 32, 8, 128, false, false, "llama3", 500000.0, KvDtype::FP8},
      {"llama hd64 14/2 linear4 bf16", 14, 2, 64, false, false, "linear", 10000.0, KvDtype::BF16},
      {"qwen2 hd64 14/2 bias bf16", 14, 2, 64, true, false, "", 1000000.0, KvDtype::BF16},
      {"qwen2 hd64 14/2 bias fp8", 14, 2, 64, true, false, "", 1000000.0, KvDtype::FP8},
      {"qwen3 hd128 32/8 qk-norm bf16", 32, 8, 128, false, true, "", 1000000.0, KvDtype::BF16},
      {"qwen3 hd128 32/8 qk-norm fp8", 32, 8, 128, false, true, "", 1000000.0, KvDtype::FP8},
      {"hd256 8/4 qk-norm linear4 fp8", 8, 4, 256, false, true, "linear", 10000.0, KvDtype::FP8},
      {"hd80 (scalar path) 8/2 bias+norm bf16", 8, 2, 80, true, true, "", 10000.0, KvDtype::BF16},
      {"hd80 (scalar path) 8/2 bias+norm fp8", 8, 2, 80, true, true, "", 10000.0, KvDtype::FP8},
      // Qwen3.5 / Qwen3-Next: 64 of 256 values rotate; the fused projection carries the
      // attention output gate (num_heads * head_dim values) after v.
      {"qwen3.5 hd256 16/2 rot64 qk-norm +gate cols bf16", 16, 2, 256, false, true, "", 1e7, KvDtype::BF16, 64,
       16 * 256},
      {"qwen3.5 hd256 16/2 rot64 qk-norm +gate cols fp8", 16, 2, 256, false, true, "", 1e7, KvDtype::FP8, 64, 16 * 256},
      // Rows 3 values longer than q, k and v are not 16-byte aligned: single values.
      {"hd256 8/2 rot64 qk-norm +3 cols (scalar path) bf16", 8, 2, 256, false, true, "", 1e7, KvDtype::BF16, 64, 3},
      {"hd256 8/2 rot64 qk-norm +3 cols (scalar path) fp8", 8, 2, 256, false, true, "", 1e7, KvDtype::FP8, 64, 3},
      {"qwen3 hd128 32/8 qk-norm +gate cols bf16", 32, 8, 128, false, true, "", 1000000.0, KvDtype::BF16, 0, 32 * 128},
      {"qwen3 hd128 32/8 qk-norm +3 cols (scalar path) fp8", 32, 8, 128, false, true, "", 1000000.0, KvDtype::FP8, 0,
       3},
      // Nemotron-H: no RoPE; q and k pass as they are, on the vector and the scalar paths.
      {"nemotron-h hd128 32/2 no rope bf16", 32, 2, 128, false, false, "", 10000.0, KvDtype::BF16, 0, 0, true},
      {"nemotron-h hd128 32/2 no rope fp8", 32, 2, 128, false, false, "", 10000.0, KvDtype::FP8, 0, 0, true},
      {"hd80 (scalar path) 8/2 no rope bf16", 8, 2, 80, false, false, "", 10000.0, KvDtype::BF16, 0, 0, true},
      // The tiny XLM-R encoder: 4 heads of 8 with biases, no RoPE.
      {"xlm-r hd16 2/2 bias no rope bf16", 2, 2, 16, true, false, "", 10000.0, KvDtype::BF16, 0, 0, true},
      {"xlm-r hd16 2/2 bias no rope fp8", 2, 2, 16, true, false, "", 10000.0, KvDtype::FP8, 0, 0, true},
      // Gemma 4's full layers: 512-wide heads, a quarter of the pairs turning, K = V (the
      // values the keys before k_norm and RoPE, normed without a weight).
      {"gemma4 hd512 32/4 k=v proportional qk-norm bf16", 32, 4, 512, false, true, "proportional", 1e6,
       KvDtype::BF16, 0, 0, false, true},
      {"gemma4 hd512 32/4 k=v proportional qk-norm fp8", 32, 4, 512, false, true, "proportional", 1e6, KvDtype::FP8,
       0, 0, false, true},
  };
  uint64_t seed = 1000;
  for (RopeCase c : cases) {
    if constexpr (std::is_same_v<T, f16>) {
      if (c.dtype == KvDtype::BF16) {
        c.dtype = KvDtype::F16;
        c.name.replace(c.name.rfind("bf16"), 4, "f16");
      } else {
        c.name += " f16";
      }
    }
    check_rope<T>(c, seed += 100);
  }

  check_swiglu<T>(7, 14336, 201);
  check_swiglu<T>(3, 768, 202);
  check_swiglu<T>(2, 24, 203);
  check_swiglu<T>(3, 256, 204, true);
  check_swiglu<T>(7, 10240, 209, false, true);  // Gemma 3 4B's intermediate size
  check_swiglu<T>(3, 256, 210, true, true);
  check_relu2<T>(7 * 1856, 205);
  check_relu2<T>(8, 206);
  check_bias_gelu<T>(7, 4096, 207);  // BGE-M3's intermediate size
  check_bias_gelu<T>(3, 24, 208);

  // Qwen3.5: 16 heads of 256 gated, the gate after q, k and v (20 heads) in each row.
  check_output_gate<T>(7, 16 * 256, 20 * 256, 36 * 256, 401);
  check_output_gate<T>(3, 100, 3, 207, 402);

  check_boundary<T>(7, 4096, 301);
  check_boundary<T>(3, 64, 302);
}

void run() {
  run_cases<bf16>();
  run_cases<f16>();
  check_position_rows(1024, true);
  check_position_rows(32, false);
  check_gated_rows(7, 2048, 5, 501);
  check_gated_rows(3, 30, 1, 502);
  check_gated_rows(5, 2688, 0, 503);

  if (emulated()) return;  // benchmarks mean nothing on the CPU emulator

  DeviceArray<bf16> table(size_t(kVocab) * kHidden);  // 1 GB: gathers miss L2 like real ones
  // 0x3C3C is finite in bf16 and f16 alike, so the f16 benchmarks read the same table.
  fill(table.get(), table.size() * 2, 0x3C);
  bench_all<bf16>(table.get());
  bench_all<f16>(reinterpret_cast<const f16*>(table.get()));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("elementwise", [] { spark::gpu_check::run(); });
}
