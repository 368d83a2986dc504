// check_moe.cu — the mixture-of-experts block on the device (moe.h) against the CPU
// backend (cpu/moe.h): the router's selection and weights for random logits with exact
// ties (Qwen3-MoE's, gpt-oss's and Nemotron-H's sigmoid rule with its score bias and
// routed scale), the decode steps' fused selection + grouping against the separate
// kernels (1..64 tokens, odd expert counts, k up to 32, ties and NaN logits), the block's
// weighted sum folded into the next add_rms_norm against combine + add_rms_norm (same
// bits), the whole block at 1, 2, 7, 16, 64 and 300 (BF16 also 4,096 in one pass)
// tokens through the expert paths a step of that size can take (decode GEMVs up to 64
// tokens, grouped GEMM) for BF16, FP16, Q8_0, Q4_K, Q6_K, FP8 (128x128 block and
// per-channel scales) and NVFP4 experts, Nemotron-H's block
// (ungated squared-ReLU experts, sigmoid router; LatentMoE's router wider than its
// experts) likewise, a token alone and among 31 others; the memory plan of Qwen3-30B-A3B (device
// bytes against the file's, bytes a batch-1 decode step reads against attention + router
// + k experts + LM head counted from the tensor list); under the emulator, the bytes a
// decode step of B = 1, 4, 16 tokens reads on a Qwen3-30B-A3B-shaped layer (B = 1, 4 on a
// Nemotron-3-Nano-shaped one) against
// (distinct experts selected) x (one expert's bytes); on a GPU, decode tok/s of a
// Qwen3-30B-A3B-shaped dummy model (BF16, Q8_0, Q4_K, FP8) at batch 1, 16 and 64 beside
// the device's copy bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/moe.h"
#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/moe.h"
#include "engine/backend/cuda/nvfp4.h"
#include "engine/backend/cuda/q8_0.h"
#include "engine/backend/cuda/rms_norm.h"
#include "engine/config.h"
#include "engine/model/arch.h"
#include "engine/model/dummy.h"
#include "engine/model/model_loader.h"
#include "engine/model/quant.h"
#include "engine/util/splitmix.h"
#include "tests/gpu/decode_bench.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {
namespace {

using cuda::bf16;
using cuda::f16;
using cuda::HalfType;
using cuda::MoePath;
using cuda::RouterRule;

const char* kCheck = "moe";
// The MoE scratch's chunk (moe.h): 300 tokens run as chunks of 128, 128 and 44.
constexpr int32_t kChunk = 128;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// ---- router ----------------------------------------------------------------------------

// Random logits where many rows hold exact ties: copies of other entries of the row (some
// across the top-k boundary), a whole row of one value, and runs of equal maxima.
std::vector<float> logits_with_ties(int32_t tokens, int32_t experts, uint64_t seed) {
  std::vector<float> v = random_floats(size_t(tokens) * size_t(experts), seed, -4.0f, 4.0f);
  for (int32_t t = 0; t < tokens; ++t) {
    float* row = v.data() + size_t(t) * size_t(experts);
    const uint64_t r = splitmix64(seed + uint64_t(t));
    switch (t % 4) {
      case 0: break;  // no ties by construction
      case 1:         // a few duplicated entries anywhere
        for (int i = 0; i < 6; ++i) row[splitmix64(r + uint64_t(i)) % uint64_t(experts)] = row[(r >> 8) % uint64_t(experts)];
        break;
      case 2:  // the whole row equal
        for (int32_t e = 0; e < experts; ++e) row[e] = 0.5f;
        break;
      case 3:  // the largest value repeated at several indices, highest last
        for (int i = 0; i < 5; ++i) row[(r >> (i * 6)) % uint64_t(experts)] = 9.0f;
        row[experts - 1] = 9.0f;
        break;
    }
  }
  return v;
}

// routed_scale: the factor cpu::moe_ffn applies to every weight route_token gives.
void router_case(RouterRule rule, int32_t experts, int32_t top_k, bool normalize, bool with_bias, cudaStream_t stream,
                 uint64_t seed, float routed_scale = 1.0f) {
  const int32_t tokens = 300;
  const std::vector<float> logits = logits_with_ties(tokens, experts, seed);
  std::vector<float> bias;
  if (with_bias) {
    bias = random_floats(size_t(experts), seed + 1, -1.0f, 1.0f);
    bias[size_t(experts / 2)] = bias[0];  // ties survive the bias too
    // The sigmoid rule's score bias decides the whole-row ties: many experts share it.
    if (rule == RouterRule::SIGMOID_BIAS)
      for (int32_t e = 3; e < experts; e += 3) bias[size_t(e)] = bias[0];
  }
  DeviceArray<float> d_logits(logits), d_bias(with_bias ? bias : std::vector<float>{0.0f});
  DeviceArray<int32_t> ids(size_t(tokens) * size_t(top_k));
  DeviceArray<float> weights(size_t(tokens) * size_t(top_k));
  CUDA_CHECK(cudaMemset(ids.get(), 0xFF, ids.size() * 4));
  weights.poison();
  cuda::moe_route(rule, d_logits.get(), with_bias ? d_bias.get() : nullptr, tokens, experts, top_k, normalize,
                  ids.get(), weights.get(), stream, false, routed_scale);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<int32_t> got_ids = ids.download();
  const std::vector<float> got_w = weights.download();
  int id_mismatch = 0;
  double worst = 0;
  std::vector<int32_t> want_ids(static_cast<size_t>(top_k));
  std::vector<float> want_w(static_cast<size_t>(top_k));
  for (int32_t t = 0; t < tokens; ++t) {
    cpu::route_token(rule, logits.data() + size_t(t) * size_t(experts), with_bias ? bias.data() : nullptr, experts,
                     top_k, normalize, want_ids.data(), want_w.data());
    for (int32_t j = 0; j < top_k; ++j) {
      const size_t at = size_t(t) * size_t(top_k) + size_t(j);
      id_mismatch += got_ids[at] != want_ids[size_t(j)];
      const double diff = std::fabs(double(got_w[at]) - double(want_w[size_t(j)] * routed_scale));
      worst = std::isfinite(diff) ? std::max(worst, diff) : INFINITY;
    }
  }
  const char* rule_name = rule == RouterRule::SOFTMAX_TOPK   ? "softmax-topk"
                          : rule == RouterRule::TOPK_SOFTMAX ? "topk-softmax"
                                                             : "sigmoid-bias";
  const std::string name = std::string(rule_name) + " E=" + std::to_string(experts) + " k=" + std::to_string(top_k) +
                           (normalize ? " norm" : "") + (with_bias ? " bias" : "") +
                           (routed_scale != 1.0f ? fmt(" scale %.1f", routed_scale) : std::string()) +
                           ", 300 tok with ties";
  row(kCheck, "router " + name + ": ids == cpu", std::to_string(id_mismatch) + " differ", "0", id_mismatch == 0);
  row(kCheck, "router " + name + ": weights vs cpu", fmt("max abs %.1e", worst), "<= 1e-6", worst <= 1e-6);
}

// The selection and grouping of a decode step in one launch (moe_route_group) against
// moe_route then moe_group on the same logits: ids, weights, offsets, active and
// tile_offsets the same bits (NaN weights included), and both groupings valid and equal to
// the one the CPU's ids give (each pair's row inside its expert's range, holding the
// pair's token, every row taken once). Logits with ties (logits_with_ties), NaN entries in
// every fifth token and a row all NaN (token 13: every score -inf, the lowest ids win).
struct Grouping {
  DeviceArray<int32_t> ids, offsets, pair_row, row_token, active, tile_offsets;
  DeviceArray<float> weights;
  Grouping(int32_t tokens, int32_t experts, int32_t top_k)
      : ids(size_t(tokens * top_k)), offsets(size_t(experts + 1)), pair_row(size_t(tokens * top_k)),
        row_token(size_t(tokens * top_k)), active(size_t(experts + 1)), tile_offsets(size_t(experts + 1)),
        weights(size_t(tokens * top_k)) {
    for (DeviceArray<int32_t>* a : {&ids, &offsets, &pair_row, &row_token, &active, &tile_offsets}) a->poison();
    weights.poison();
  }
  cuda::MoeGroups groups() const {
    return {offsets.get(), pair_row.get(), row_token.get(), active.get(), tile_offsets.get()};
  }
};

// What is wrong with g's grouping of `want_ids` (empty: nothing): the expert ranges,
// the active list and the tiles as the ids give them, each pair's row in its expert's
// range holding its token, no row taken twice.
std::string grouping_errors(const Grouping& g, const std::vector<int32_t>& want_ids, int32_t experts, int32_t top_k,
                            int32_t tile_rows) {
  const size_t pairs = want_ids.size();
  std::vector<int32_t> count(size_t(experts), 0);
  for (int32_t e : want_ids) ++count[size_t(e)];
  std::vector<int32_t> offsets(size_t(experts + 1)), tiles(size_t(experts + 1)), active;
  for (int32_t e = 0; e < experts; ++e) {
    offsets[size_t(e) + 1] = offsets[size_t(e)] + count[size_t(e)];
    tiles[size_t(e) + 1] = tiles[size_t(e)] + (count[size_t(e)] + tile_rows - 1) / tile_rows;
    if (count[size_t(e)] > 0) active.push_back(e);
  }
  const std::vector<int32_t> got_offsets = g.offsets.download(), got_tiles = g.tile_offsets.download(),
                             got_active = g.active.download(), pair_row = g.pair_row.download(),
                             row_token = g.row_token.download();
  if (got_offsets != offsets) return "offsets";
  if (got_tiles != tiles) return "tile_offsets";
  if (got_active[size_t(experts)] != int32_t(active.size()) ||
      !std::equal(active.begin(), active.end(), got_active.begin()))
    return "active";
  std::vector<bool> taken(pairs, false);
  for (size_t p = 0; p < pairs; ++p) {
    const int32_t r = pair_row[p], e = want_ids[p];
    if (r < offsets[size_t(e)] || r >= offsets[size_t(e) + 1] || taken[size_t(r)]) return "pair_row";
    taken[size_t(r)] = true;
    if (row_token[size_t(r)] != int32_t(p) / top_k) return "row_token";
  }
  return "";
}

void route_group_case(RouterRule rule, int32_t experts, int32_t top_k, bool normalize, bool with_bias,
                      bool with_expert_scale, int32_t tile_rows, const std::vector<int32_t>& token_counts,
                      cudaStream_t stream, uint64_t seed, float routed_scale = 1.0f) {
  const int32_t most = *std::max_element(token_counts.begin(), token_counts.end());
  std::vector<float> logits = logits_with_ties(most, experts, seed);
  for (int32_t t = 4; t < most; t += 5)
    for (int i = 0; i < 3; ++i) logits[size_t(t) * experts + splitmix64(seed + uint64_t(t * 3 + i)) % uint64_t(experts)] = NAN;
  if (most > 13)
    for (int32_t e = 0; e < experts; ++e) logits[size_t(13) * experts + size_t(e)] = NAN;
  std::vector<float> bias = random_floats(size_t(experts), seed + 1, -1.0f, 1.0f);
  bias[size_t(experts / 2)] = bias[0];
  const std::vector<float> scale = random_floats(size_t(experts), seed + 2, 0.5f, 2.0f);
  const DeviceArray<float> d_logits(logits), d_bias(bias), d_scale(scale);
  const float* b = with_bias ? d_bias.get() : nullptr;
  const float* s = with_expert_scale ? d_scale.get() : nullptr;
  int failed_counts = 0;
  std::string first;
  for (int32_t tokens : token_counts) {
    Grouping two(tokens, experts, top_k), one(tokens, experts, top_k);
    cuda::moe_route(rule, d_logits.get(), b, tokens, experts, top_k, normalize, two.ids.get(), two.weights.get(),
                    stream, false, routed_scale, s);
    cuda::moe_group(two.ids.get(), tokens, top_k, experts, tile_rows, two.groups(), stream);
    cuda::moe_route_group(rule, d_logits.get(), b, tokens, experts, top_k, normalize, one.ids.get(),
                          one.weights.get(), tile_rows, one.groups(), stream, false, routed_scale, s);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // The CPU's ids where a row has no NaN (its sort is undefined on NaN); on the others the
    // separate kernels' ids, which must still be k distinct experts.
    const std::vector<int32_t> separate_ids = two.ids.download();
    std::vector<int32_t> want_ids(size_t(tokens * top_k));
    std::vector<float> unused(static_cast<size_t>(top_k));
    bool valid = true;
    for (int32_t t = 0; t < tokens; ++t) {
      const float* row = logits.data() + size_t(t) * experts;
      int32_t* want = want_ids.data() + size_t(t) * top_k;
      if (std::none_of(row, row + experts, [](float v) { return std::isnan(v); })) {
        cpu::route_token(rule, row, with_bias ? bias.data() : nullptr, experts, top_k, normalize, want, unused.data());
        continue;
      }
      std::copy_n(separate_ids.begin() + size_t(t) * top_k, top_k, want);
      std::set<int32_t> distinct(want, want + top_k);
      valid = valid && int32_t(distinct.size()) == top_k && *distinct.begin() >= 0 && *distinct.rbegin() < experts;
    }
    const std::vector<float> w1 = one.weights.download(), w2 = two.weights.download();
    std::string err = !valid                          ? "ids on NaN rows not k distinct experts"
                      : one.ids.download() != want_ids ? "fused ids"
                      : separate_ids != want_ids       ? "separate ids vs cpu"
                      : std::memcmp(w1.data(), w2.data(), w1.size() * 4) != 0 ? "weights' bits"
                                                                               : "";
    if (err.empty()) {
      const std::string a = grouping_errors(one, want_ids, experts, top_k, tile_rows);
      const std::string c = grouping_errors(two, want_ids, experts, top_k, tile_rows);
      err = !a.empty() ? "fused " + a : !c.empty() ? "separate " + c : "";
    }
    if (!err.empty()) {
      ++failed_counts;
      if (first.empty()) first = "T=" + std::to_string(tokens) + ": " + err;
    }
  }
  const char* rule_name = rule == RouterRule::SOFTMAX_TOPK   ? "softmax-topk"
                          : rule == RouterRule::TOPK_SOFTMAX ? "topk-softmax"
                                                             : "sigmoid-bias";
  const std::string name = std::string("route+group fused vs separate: ") + rule_name + " E=" +
                           std::to_string(experts) + " k=" + std::to_string(top_k) + (normalize ? " norm" : "") +
                           (with_bias ? " bias" : "") + (with_expert_scale ? " expert scales" : "") +
                           (routed_scale != 1.0f ? fmt(" scale %.1f", routed_scale) : std::string()) + " tiles of " +
                           std::to_string(tile_rows) + ", " + std::to_string(token_counts.size()) +
                           " sizes 1.." + std::to_string(most) + " tok, ties + NaN";
  row(kCheck, name, failed_counts ? first : "all the same", "0 sizes differ", failed_counts == 0);
}

// ---- the MoE block ---------------------------------------------------------------------

// A host matrix in `dtype` (BF16, F16 or Q8_0) of random values in [-scale, scale).
struct HostMatrix {
  std::vector<uint8_t> bytes;
  Tensor tensor;
  // Points `tensor` at the bytes, which hold [rows, cols] in `dtype`.
  void describe(DType dtype, int64_t rows, int64_t cols) {
    tensor.name = "w";
    tensor.dtype = dtype;
    tensor.shape = {rows, cols};
    tensor.data = bytes.data();
    tensor.nbytes = bytes.size();
  }
  // Rows [row0, row0 + n) as a tensor of their own (an expert's slice of a stack).
  Tensor rows(int64_t row0, int64_t n) const {
    Tensor t = tensor;
    const size_t row_bytes = dtype_nbytes(t.dtype, t.cols(), t.cols());
    t.data = bytes.data() + size_t(row0) * row_bytes;
    t.shape = {n, t.cols()};
    t.nbytes = size_t(n) * row_bytes;
    return t;
  }
};

HostMatrix random_matrix(DType dtype, int64_t rows, int64_t cols, float scale, uint64_t seed) {
  const std::vector<float> v = random_floats(size_t(rows * cols), seed, -scale, scale);
  HostMatrix m;
  m.bytes.resize(dtype_nbytes(dtype, rows * cols, cols));
  if (dtype == DType::Q8_0) {  // GGUF's Q8_0: d = amax / 127, q = round(x / d)
    auto* blocks = reinterpret_cast<BlockQ8_0*>(m.bytes.data());
    for (size_t b = 0; b < v.size() / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + size_t(j)]));
      const float d = amax / 127.0f;
      const f16 dh = __float2half(d);
      std::memcpy(&blocks[b].d, &dh, 2);
      for (int j = 0; j < 32; ++j) blocks[b].qs[j] = int8_t(std::lround(d > 0 ? v[b * 32 + size_t(j)] / d : 0.0f));
    }
  } else {
    auto* out = reinterpret_cast<uint16_t*>(m.bytes.data());
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == DType::BF16) {
        const bf16 h = __float2bfloat16(v[i]);
        std::memcpy(&out[i], &h, 2);
      } else {
        const f16 h = __float2half(v[i]);
        std::memcpy(&out[i], &h, 2);
      }
    }
  }
  m.describe(dtype, rows, cols);
  return m;
}

// A host matrix of random e4m3 bytes (random signs, exponents 4..10: magnitudes 1/8 ..
// 15, and mantissas; no NaN); its scales are set per matrix by Layer.
HostMatrix random_fp8(int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m;
  m.bytes.resize(size_t(rows * cols));
  for (size_t i = 0; i < m.bytes.size(); ++i) {
    const uint64_t r = splitmix64(seed * 0x9E3779B97F4A7C15ull + i);
    m.bytes[i] = uint8_t((r & 0x80) | (((r >> 8) % 7 + 4) << 3) | ((r >> 16) & 7));
  }
  m.describe(DType::F8_E4M3, rows, cols);
  return m;
}

// A host matrix of random GGUF blocks (Q4_K, Q6_K, Q5_0 or Q5_1): random quants and scales,
// super-block scales d (and dmin) random halves of ~1/(64 sqrt(cols)) (Q5_0 and Q5_1, whose
// quants carry no sub-block scale: d and m 16 times that), so values stay O(1/sqrt(cols)).
HostMatrix random_k_blocks(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m;
  m.bytes.resize(dtype_nbytes(dtype, rows * cols, cols));
  for (size_t i = 0; i < m.bytes.size(); ++i) m.bytes[i] = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
  const size_t block = size_t(dtype_block_bytes(dtype)), blocks = m.bytes.size() / block;
  const std::vector<float> d = random_floats(blocks * 2, seed + 5, 0.2f, 1.0f);
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* p = m.bytes.data() + b * block;
    const f16 dh = __float2half(d[2 * b] / (64.0f * std::sqrt(float(cols))));
    const f16 mh = __float2half(d[2 * b + 1] / (64.0f * std::sqrt(float(cols))));
    if (dtype == DType::Q4_K) {
      std::memcpy(p + offsetof(BlockQ4_K, d), &dh, 2);
      std::memcpy(p + offsetof(BlockQ4_K, dmin), &mh, 2);
    } else if (dtype == DType::Q5_0 || dtype == DType::Q5_1) {
      const f16 d16 = __float2half(16.0f * __half2float(dh)), m16 = __float2half(-16.0f * __half2float(mh));
      std::memcpy(p, &d16, 2);
      if (dtype == DType::Q5_1) std::memcpy(p + offsetof(BlockQ5_1, m), &m16, 2);
    } else {
      std::memcpy(p + offsetof(BlockQ6_K, d), &dh, 2);
    }
  }
  m.describe(dtype, rows, cols);
  return m;
}

// A host matrix of random NVFP4 blocks: random codes, sub-block scales of E4M3 values
// 0.5 .. 2.75 (no NaN); each matrix's tensor scale is set by Layer.
HostMatrix random_nvfp4(int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m;
  m.bytes.resize(dtype_nbytes(DType::NVFP4, rows * cols, cols));
  for (size_t i = 0; i < m.bytes.size(); ++i) {
    const uint8_t b = uint8_t(splitmix64(seed * 0x9E3779B97F4A7C15ull + i));
    m.bytes[i] = i % sizeof(BlockNVFP4) < 4 ? uint8_t(0x30 + b % 24) : b;
  }
  m.describe(DType::NVFP4, rows, cols);
  return m;
}

// A matrix on the device as DeviceWeights lays it out: 16-bit copied, Q8_0 repacked,
// the other block formats as the file's blocks, an FP8 stack as its e4m3 bytes and the
// scale grids of its matrices one after another (`scales`), an NVFP4 stack as its blocks
// and each matrix's one scale (`scales`) on each of its rows.
struct DeviceMatrixOwner {
  DeviceArray<uint8_t> data, scales;
  cuda::DeviceMatrix matrix;
  DeviceMatrixOwner(const Tensor& t, const std::vector<float>& fp8_scales) {
    if (t.dtype == DType::NVFP4) {
      data = DeviceArray<uint8_t>(cuda::nvfp4_bytes(t.rows(), t.cols()));
      const int64_t per = t.rows() / int64_t(fp8_scales.size());
      std::vector<float> rows(size_t(t.rows()));
      for (size_t r = 0; r < rows.size(); ++r) rows[r] = fp8_scales[r / size_t(per)];
      CUDA_CHECK(cudaMemcpy(data.get(), t.data, t.nbytes, cudaMemcpyHostToDevice));
      float* s = reinterpret_cast<float*>(data.get() + cuda::nvfp4_scales_offset(t.rows(), t.cols()));
      CUDA_CHECK(cudaMemcpy(s, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
      matrix = {cuda::WeightFormat::NVFP4, data.get(), s};
    } else if (t.dtype == DType::F8_E4M3) {
      data = DeviceArray<uint8_t>(t.nbytes);
      scales = DeviceArray<uint8_t>(fp8_scales.size() * 4);
      CUDA_CHECK(cudaMemcpy(data.get(), t.data, t.nbytes, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(scales.get(), fp8_scales.data(), scales.size(), cudaMemcpyHostToDevice));
      matrix = {cuda::WeightFormat::FP8, data.get(), scales.get(), 0, nullptr, int32_t(t.scale_block_rows),
                int32_t(t.scale_block_cols)};
    } else if (t.dtype == DType::Q8_0) {
      data = DeviceArray<uint8_t>(size_t(t.numel()));
      scales = DeviceArray<uint8_t>(size_t(t.numel() / 32) * 2);
      cuda::upload_q8_0(t, data.get(), scales.get());
      matrix = {cuda::WeightFormat::Q8_0, data.get(), scales.get()};
    } else if (const auto f = cuda::packed_format(t.dtype)) {
      data = DeviceArray<uint8_t>(t.nbytes);
      cuda::upload_blocks(t, data.get());
      matrix = {*f, data.get(), nullptr};
    } else {
      data = DeviceArray<uint8_t>(t.nbytes);
      CUDA_CHECK(cudaMemcpy(data.get(), t.data, t.nbytes, cudaMemcpyHostToDevice));
      matrix = {cuda::WeightFormat::HALF, data.get(), nullptr};
    }
  }
};

// Nemotron-H's block (left default: Qwen3-MoE's): the sigmoid router with a score-correction
// bias and routed_scale, ungated squared-ReLU experts; router_hidden > 0: LatentMoE, the
// router reads rows that wide while the experts run on `hidden` wide vectors.
struct Nemotron {
  bool on = false;
  int32_t router_hidden = 0;
  float routed_scale = 2.5f;
};

// One MoE layer: ffn_norm, router, experts stacked as moe.h wants them, and the CPU's view of them.
struct Layer {
  cuda::MoeConfig cfg;
  std::vector<float> norm;
  HostMatrix router, gate_up, down;
  std::vector<float> gate_up_scales, down_scales;  // FP8: each matrix's grid; NVFP4: its scale; in stack order
  std::vector<float> score_bias;                   // Nemotron-H: [experts]
  Tensor score_bias_tensor;
  cpu::MoeWeights cpu;
  std::vector<Tensor> views;  // backing for cpu's pointers: each expert's gate (ungated: its up again), up, down

  int32_t router_width() const { return cfg.router_hidden > 0 ? cfg.router_hidden : cfg.shape.hidden; }

  // fp8_block: FP8 experts' scale blocks, fp8_block x fp8_block, or 0 for one scale a row.
  Layer(DType expert_dtype, DType router_dtype, int32_t experts, int32_t top_k, int32_t hidden, int32_t inter,
        uint64_t seed, int64_t fp8_block = 128, Nemotron nemotron = {}) {
    const bool gated = !nemotron.on;
    cfg.shape = {experts, hidden, inter, gated};
    cfg.top_k = top_k;
    cfg.normalize = true;
    if (nemotron.on) {
      cfg.rule = RouterRule::SIGMOID_BIAS;
      cfg.routed_scale = nemotron.routed_scale;
      cfg.router_hidden = nemotron.router_hidden;
    }
    const int32_t rh = router_width();
    const int64_t up_rows = int64_t(experts) * (gated ? 2 : 1) * inter;  // rows of the gate_up stack
    norm = random_floats(size_t(rh), seed + 3, 0.5f, 1.5f);
    router = random_matrix(router_dtype, experts, rh, 1.0f / std::sqrt(float(rh)) * 4, seed);
    const bool k_quant = expert_dtype == DType::Q4_K || expert_dtype == DType::Q6_K || expert_dtype == DType::Q5_0 ||
                         expert_dtype == DType::Q5_1;
    const bool fp8 = expert_dtype == DType::F8_E4M3, nvfp4 = expert_dtype == DType::NVFP4;
    gate_up = k_quant ? random_k_blocks(expert_dtype, up_rows, hidden, seed + 1)
              : fp8   ? random_fp8(up_rows, hidden, seed + 1)
              : nvfp4 ? random_nvfp4(up_rows, hidden, seed + 1)
                      : random_matrix(expert_dtype, up_rows, hidden, 1.0f / std::sqrt(float(hidden)) * 2, seed + 1);
    down = k_quant ? random_k_blocks(expert_dtype, int64_t(experts) * hidden, inter, seed + 2)
           : fp8   ? random_fp8(int64_t(experts) * hidden, inter, seed + 2)
           : nvfp4 ? random_nvfp4(int64_t(experts) * hidden, inter, seed + 2)
                   : random_matrix(expert_dtype, int64_t(experts) * hidden, inter, 1.0f / std::sqrt(float(inter)) * 2,
                                   seed + 2);
    views.reserve(size_t(experts) * 3);
    for (int32_t e = 0; e < experts; ++e) {
      const int64_t up_row0 = gated ? int64_t(e) * 2 * inter + inter : int64_t(e) * inter;
      views.push_back(gate_up.rows(gated ? int64_t(e) * 2 * inter : up_row0, inter));
      views.push_back(gate_up.rows(up_row0, inter));
      views.push_back(down.rows(int64_t(e) * hidden, hidden));
    }
    if (fp8) attach_fp8_scales(experts, fp8_block, seed + 6);
    if (nvfp4) attach_fp8_scales(experts, -1, seed + 6);
    cpu.router = &router.tensor;
    for (int32_t e = 0; e < experts; ++e) {
      if (gated) cpu.gate.push_back(&views[size_t(e) * 3]);
      cpu.up.push_back(&views[size_t(e) * 3 + 1]);
      cpu.down.push_back(&views[size_t(e) * 3 + 2]);
    }
    cpu.top_k = top_k;
    cpu.norm_topk_prob = true;
    if (nemotron.on) {
      // Of the scores' size (sigmoid in (0, 1)), so that it changes the selection; a few
      // experts share a value, ties that only the index breaks.
      score_bias = random_floats(size_t(experts), seed + 7, -0.3f, 0.3f);
      for (int32_t e = 4; e < experts; e += 4) score_bias[size_t(e)] = score_bias[0];
      score_bias_tensor.name = "score_bias";
      score_bias_tensor.dtype = DType::F32;
      score_bias_tensor.shape = {experts};
      score_bias_tensor.data = score_bias.data();
      score_bias_tensor.nbytes = score_bias.size() * 4;
      cpu.score_bias = &score_bias_tensor;
      cpu.routed_scale = nemotron.routed_scale;
      cpu.relu2 = true;
    }
  }
  Layer(const Layer&) = delete;  // cpu and the views point into it

  // Random scales in [0.5, 1) / (8 sqrt(cols)) (values O(1/sqrt(cols))), one grid per
  // matrix: gate_e and up_e's after each other in gate_up_scales (ungated: up_e's alone),
  // down_e's in down_scales. block: FP8's scale blocks (0: one scale a row); -1: one
  // scale a matrix (NVFP4's tensor scale).
  void attach_fp8_scales(int32_t experts, int64_t block, uint64_t seed) {
    auto make = [&](HostMatrix& stack, std::vector<float>& scales, int64_t matrices, int64_t rows, uint64_t s) {
      const int64_t cols = stack.tensor.cols();
      stack.tensor.scale_block_rows = block > 0 ? block : block < 0 ? rows : 1;
      stack.tensor.scale_block_cols = block > 0 ? block : cols;
      const int64_t grid =
          cuda::ceil_div(rows, stack.tensor.scale_block_rows) * cuda::ceil_div(cols, stack.tensor.scale_block_cols);
      scales = random_floats(size_t(matrices * grid), s, 0.5f, 1.0f);
      for (float& v : scales) v /= 8.0f * std::sqrt(float(cols));
      return grid;
    };
    const int64_t inter = cfg.shape.inter, hidden = cfg.shape.hidden, per = cfg.shape.gated ? 2 : 1;
    const int64_t gu = make(gate_up, gate_up_scales, per * int64_t(experts), inter, seed);
    const int64_t dn = make(down, down_scales, experts, hidden, seed + 1);
    for (int32_t e = 0; e < experts; ++e) {
      const int64_t up_grid = per * e + per - 1;
      const std::pair<const HostMatrix*, const float*> of[3] = {{&gate_up, gate_up_scales.data() + per * e * gu},
                                                                {&gate_up, gate_up_scales.data() + up_grid * gu},
                                                                {&down, down_scales.data() + e * dn}};
      for (int j = 0; j < 3; ++j) {
        Tensor& t = views[size_t(e) * 3 + size_t(j)];
        t.scale = of[j].second;
        t.scale_block_rows = of[j].first->tensor.scale_block_rows;
        t.scale_block_cols = of[j].first->tensor.scale_block_cols;
      }
    }
  }
};

// The router in f32, as DeviceWeights keeps it.
std::vector<float> f32_rows(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  for (int64_t r = 0; r < t.rows(); ++r) dequantize_tensor_row(t, r, out.data() + r * t.cols());
  return out;
}

struct DeviceLayer {
  DeviceArray<float> norm, router, score_bias;
  DeviceMatrixOwner gate_up, down;
  cuda::MoeLayerWeights w;
  DeviceArray<uint8_t> scratch_memory;
  cuda::MoeScratch scratch;
  // chunk: the tokens a pass of the block takes (the backend's plan sizes it by its largest step).
  explicit DeviceLayer(const Layer& l, int32_t chunk = kChunk)
      : norm(l.norm),
        router(f32_rows(l.router.tensor)),
        score_bias(l.score_bias.empty() ? std::vector<float>{0.0f} : l.score_bias),
        gate_up(l.gate_up.tensor, l.gate_up_scales),
        down(l.down.tensor, l.down_scales),
        scratch_memory(cuda::MoeScratch::bytes(l.cfg, chunk)),
        scratch(l.cfg, chunk, scratch_memory.get()) {
    w.norm = norm.get();
    w.router = router.get();
    w.score_bias = l.score_bias.empty() ? nullptr : score_bias.get();
    w.experts = {gate_up.matrix, down.matrix};
  }
};

constexpr float kEps = 1e-6f;

// The inputs of one block: the residual rows (f32) and their RMSNorm through the layer's
// ffn_norm, in f32 for the CPU backend and rounded to T for the device's experts. LatentMoE
// (router_hidden set): the experts read `latent` instead, random rows of the experts'
// width standing for the caller's projection of the normed rows (the block does not
// care where they come from).
struct Inputs {
  std::vector<float> residual, normed, latent;
  const std::vector<float>& experts_in() const { return latent.empty() ? normed : latent; }
};
Inputs make_inputs(const Layer& l, int32_t tokens, uint64_t seed) {
  const int32_t H = l.router_width();
  Inputs in{random_floats(size_t(tokens) * H, seed, -2.0f, 2.0f), std::vector<float>(size_t(tokens) * H), {}};
  for (int32_t t = 0; t < tokens; ++t)
    cpu::rms_norm(in.residual.data() + size_t(t) * H, l.norm.data(), H, kEps, in.normed.data() + size_t(t) * H);
  if (l.cfg.router_hidden > 0) in.latent = random_floats(size_t(tokens) * l.cfg.shape.hidden, seed + 1, -1.5f, 1.5f);
  return in;
}

template <typename T>
std::vector<float> run_device(const Layer& l, DeviceLayer& d, const Inputs& in, int32_t tokens, MoePath path,
                              cudaStream_t stream) {
  DeviceArray<T> dx(to_half<T>(in.experts_in()));
  DeviceArray<float> residual(in.residual);
  DeviceArray<float> out(size_t(tokens) * size_t(l.cfg.shape.hidden));
  out.poison();
  d.scratch_memory.poison();
  cuda::moe_forward(half_type_of<T>(), l.cfg, d.w, residual.get(), kEps, dx.get(), tokens, d.scratch, out.get(), stream,
                    false, path);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out.download();
}

// fp8_block: FP8 experts' scale blocks (Layer). K-quant rows are whole 256-value
// super-blocks; FP8's inter of 192 is 1.5 blocks of 128, so the last block of each
// expert's gate and up rows (and of its down columns) is partial.
// The paths a step of `tokens` rows can take when served: the grouped GEMM always, the
// decode GEMV up to kMoeGemvMaxTokens (moe.cu's choice; past it the GEMV would only be
// checked at sizes it never runs, at 6-10 s a row under the emulator).
std::vector<MoePath> paths_serving(int32_t tokens) {
  if (tokens <= cuda::kMoeGemvMaxTokens) return {MoePath::GEMV, MoePath::GEMM};
  return {MoePath::GEMM};
}

template <typename T>
void block_case(DType expert_dtype, const std::vector<int32_t>& token_counts, cudaStream_t stream, uint64_t seed,
                int64_t fp8_block = 128) {
  const bool k_quant = expert_dtype == DType::Q4_K || expert_dtype == DType::Q6_K;
  const bool fp8 = expert_dtype == DType::F8_E4M3;
  // NVFP4: 3 blocks of 64 a down row.
  const int32_t experts = 16, top_k = 4, hidden = 256,
                inter = k_quant ? 256 : fp8 || expert_dtype == DType::NVFP4 ? 192 : 96;
  const DType router_dtype = std::is_same_v<T, f16> ? DType::F16 : DType::BF16;
  const Layer l(expert_dtype, router_dtype, experts, top_k, hidden, inter, seed, fp8_block);
  DeviceLayer d(l);
  // A step of more than 300 tokens in one pass, as the backend runs its largest prefills.
  std::optional<DeviceLayer> whole;
  ThreadPool pool(2);
  // The device's experts read the normed rows rounded to the compute type and round the
  // SwiGLU output to it (bf16: 2^-9 relative each); the CPU keeps f32. The GEMM path also
  // rounds each dequantized Q8_0 weight to 16 bits.
  const double limit = std::is_same_v<T, f16> ? 3e-3 : 1e-2;
  const std::string block = std::to_string(fp8_block);
  const std::string scales = !fp8 ? "" : fp8_block > 0 ? " (" + block + "x" + block + " blocks)" : " (per channel)";
  const std::string name = std::string(dtype_name(expert_dtype)) + scales + " experts, " + half_name<T>() + " E=" +
                           std::to_string(experts) + " k=" + std::to_string(top_k) + " h=" + std::to_string(hidden) +
                           " i=" + std::to_string(inter);
  for (int32_t tokens : token_counts) {
    const Inputs in = make_inputs(l, tokens, seed * 7 + uint64_t(tokens));
    std::vector<float> want(in.normed.size());
    cpu::moe_ffn(pool, l.cpu, in.normed.data(), tokens, hidden, want.data());
    if (tokens > 300 && !whole) whole.emplace(l, cuda::MoeScratch::kMaxChunkTokens);
    for (MoePath path : paths_serving(tokens)) {
      const std::vector<float> got = run_device<T>(l, tokens > 300 ? *whole : d, in, tokens, path, stream);
      error_row(kCheck,
                name + " T=" + std::to_string(tokens) + (path == MoePath::GEMV ? " gemv" : " grouped gemm") + " vs cpu",
                rel_error(want, got), limit);
    }
  }
}

// Nemotron-H's block (Nemotron): 16 experts, k = 6, ungated squared-ReLU experts, the
// sigmoid router with a score-correction bias, normalised, times routed_scale 2.5. With
// router_hidden (LatentMoE) the router reads rows that wide and the experts `hidden`
// (16: the test fixture's moe_latent_size, half a k step of the grouped GEMM); the CPU's
// reference is cpu::moe_ffn with route_x. The same limits as block_case: relu(up)^2
// rounded to the compute type adds one rounding, as SwiGLU's product does.
template <typename T>
void nemotron_case(DType expert_dtype, int32_t hidden, int32_t inter, int32_t router_hidden,
                   const std::vector<int32_t>& token_counts, cudaStream_t stream, uint64_t seed) {
  const int32_t experts = 16, top_k = 6;
  const DType router_dtype = std::is_same_v<T, f16> ? DType::F16 : DType::BF16;
  const Layer l(expert_dtype, router_dtype, experts, top_k, hidden, inter, seed, 128,
                Nemotron{true, router_hidden, 2.5f});
  DeviceLayer d(l);
  ThreadPool pool(2);
  const double limit = std::is_same_v<T, f16> ? 3e-3 : 1e-2;
  const std::string fp8_scales = expert_dtype == DType::F8_E4M3 ? " (128x128 blocks)" : "";
  const std::string name = std::string("nemotron-h ") + (router_hidden > 0 ? "latent " : "") + "relu2 " +
                           std::string(dtype_name(expert_dtype)) + fp8_scales + " experts, " + half_name<T>() +
                           " sigmoid+bias scale 2.5 E=" + std::to_string(experts) + " k=" + std::to_string(top_k) +
                           " h=" + std::to_string(hidden) + " i=" + std::to_string(inter) +
                           (router_hidden > 0 ? " router=" + std::to_string(router_hidden) : std::string());
  for (int32_t tokens : token_counts) {
    const Inputs in = make_inputs(l, tokens, seed * 7 + uint64_t(tokens));
    std::vector<float> want(size_t(tokens) * size_t(hidden));
    cpu::moe_ffn(pool, l.cpu, in.experts_in().data(), tokens, hidden, want.data(),
                 router_hidden > 0 ? in.normed.data() : nullptr);
    for (MoePath path : paths_serving(tokens)) {
      const std::vector<float> got = run_device<T>(l, d, in, tokens, path, stream);
      error_row(kCheck,
                name + " T=" + std::to_string(tokens) + (path == MoePath::GEMV ? " gemv" : " grouped gemm") + " vs cpu",
                rel_error(want, got), limit);
    }
  }
}

// A token's output alone and as row 5 of 32 (the decode path, as a graph bucket runs it):
// the expert kernels compute every row on its own, so the same bits.
void batch_invariance(cudaStream_t stream) {
  const Layer l(DType::Q8_0, DType::BF16, 16, 4, 256, 96, 41);
  DeviceLayer d(l);
  const Inputs batch = make_inputs(l, 32, 43);
  Inputs alone;
  for (auto [from, to] : {std::pair{&batch.residual, &alone.residual}, std::pair{&batch.normed, &alone.normed}})
    to->assign(from->begin() + 5 * 256, from->begin() + 6 * 256);
  const std::vector<float> a = run_device<bf16>(l, d, alone, 1, MoePath::GEMV, stream);
  const std::vector<float> b = run_device<bf16>(l, d, batch, 32, MoePath::GEMV, stream);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[5 * 256 + i];
  row(kCheck, "Q8_0 block: token alone vs row 5 of 32 (gemv path)", std::to_string(differ) + " values differ",
      "0 (same bits)", differ == 0);
}

// The block's weighted sum left to the next norm (moe_forward without out, add_rms_norm
// of WeightedRows, as layer_forward.cu runs a plain MoE layer) against moe_combine's sum
// added by add_rms_norm: x and the normed rows the same bits, at decode sizes and a whole
// chunk, with the norm and with the add alone (the stage's last layer). Qwen3-MoE-shaped
// (softmax, k = 4) and gpt-oss-shaped (router bias, softmax over the k) routers.
void folded_sum_case(RouterRule rule, cudaStream_t stream) {
  Layer l(DType::Q8_0, DType::BF16, 16, 4, 256, 96, 61);
  l.cfg.rule = rule;
  DeviceLayer d(l);
  const DeviceArray<float> router_bias(random_floats(16, 62, -1.0f, 1.0f));
  if (rule == RouterRule::TOPK_SOFTMAX) d.w.router_bias = router_bias.get();
  const int32_t H = 256;
  const DeviceArray<float> norm_w(random_floats(size_t(H), 63, 0.5f, 1.5f));
  int differ = 0;
  for (int32_t tokens : {1, 7, 64, kChunk}) {
    const Inputs in = make_inputs(l, tokens, 64 + uint64_t(tokens));
    const DeviceArray<bf16> dx(to_half<bf16>(in.normed));
    const DeviceArray<float> residual(in.residual);
    for (bool with_norm : {true, false}) {
      DeviceArray<float> x_a(in.residual), x_b(in.residual), sum(size_t(tokens) * H);
      DeviceArray<bf16> out_a(size_t(tokens) * H), out_b(size_t(tokens) * H);
      out_a.poison();
      out_b.poison();
      cuda::moe_forward(HalfType::BF16, l.cfg, d.w, residual.get(), kEps, dx.get(), tokens, d.scratch, sum.get(),
                        stream, false);
      cuda::add_rms_norm<bf16>(x_a.get(), sum.get(), with_norm ? norm_w.get() : nullptr, tokens, H, kEps,
                               with_norm ? out_a.get() : nullptr, stream);
      d.scratch_memory.poison();
      cuda::moe_forward(HalfType::BF16, l.cfg, d.w, residual.get(), kEps, dx.get(), tokens, d.scratch, nullptr, stream,
                        false);
      const cuda::WeightedRows folded{d.scratch.y, d.scratch.groups.pair_row, d.scratch.weights, l.cfg.top_k};
      cuda::add_rms_norm<bf16>(x_b.get(), folded, with_norm ? norm_w.get() : nullptr, tokens, H, kEps,
                               with_norm ? out_b.get() : nullptr, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> a = x_a.download(), b = x_b.download();
      differ += std::memcmp(a.data(), b.data(), a.size() * 4) != 0;
      const std::vector<bf16> oa = out_a.download(), ob = out_b.download();
      differ += std::memcmp(oa.data(), ob.data(), oa.size() * 2) != 0;
      // The sum must reach x: a fold that added nothing would match only a zero sum.
      differ += a == in.residual;
    }
  }
  row(kCheck,
      std::string("MoE sum folded into add_rms_norm (") +
          (rule == RouterRule::TOPK_SOFTMAX ? "topk-softmax bias" : "softmax-topk") +
          ") vs combine + add_rms_norm, T=1/7/64/128, norm and add alone",
      std::to_string(differ) + " outputs differ", "0 (same bits)", differ == 0);
}

// ---- memory plan ----------------------------------------------------------------------

constexpr const char* kQwen3_30B = "tests/golden/configs/qwen3_30b_a3b";
constexpr double kGb10CopyGBs = 218.0;  // GB10's measured copy bandwidth (PRACTICES.md)

// Qwen3-30B-A3B's spec from its config.json; FP8 as Qwen3-30B-A3B-FP8 stores it: 128x128
// block scales (counted as f32, as the device keeps them).
ModelSpec qwen3_30b_spec(DType dtype) {
  Config c = config_for_model(kQwen3_30B);
  c.model.load_format = "dummy";
  ModelSpec spec = inspect_model(c).spec;
  if (dtype == DType::F8_E4M3) {
    spec.fp8 = true;
    spec.fp8_block_rows = spec.fp8_block_cols = 128;
  }
  return spec;
}

// The dtype a part of it is stored in, as make_dummy_weights stores it (FP8: embedding, LM
// head and router in BF16).
DType stored_dtype(DType dtype, Part p) {
  if (part_is_norm(p)) return DType::F32;
  return dtype == DType::F8_E4M3 && (p == Part::EMBEDDING || p == Part::LM_HEAD || p == Part::ROUTER) ? DType::BF16
                                                                                                       : dtype;
}

// Qwen3-30B-A3B with every matrix in `dtype`: the device's bytes against the tensors'
// bytes in such a file, and the bytes a batch-1 decode step reads (weight_bytes_per_token)
// against the sum, from the tensor list, of every matrix but the embedding with each
// expert's counted top_k / num_experts times; the projected GB10 rate from it. FP8 as
// qwen3_30b_spec and stored_dtype say.
void plan_rows(DType dtype) {
  const ModelSpec spec = qwen3_30b_spec(dtype);
  const bool fp8 = dtype == DType::F8_E4M3;
  const auto stored_as = [dtype](Part p) { return stored_dtype(dtype, p); };
  double file_bytes = 0, active = 0;
  for (const TensorSpec& t : expected_tensors(spec, full_range(spec))) {
    int64_t elems = 1;
    for (int64_t d : t.shape) elems *= d;
    const DType as = stored_as(t.part);
    double bytes = double(dtype_nbytes(as, elems, t.shape.back()));
    if (as == DType::F8_E4M3) bytes += double(cuda::ceil_div(t.shape[0], 128) * cuda::ceil_div(t.shape[1], 128)) * 4;
    file_bytes += bytes;
    if (t.part == Part::EMBEDDING) continue;
    active += part_is_per_expert(t.part) ? bytes * double(spec.num_experts_per_tok) / double(spec.num_experts) : bytes;
  }
  const StoredDType stored = [&stored_as](Part p, int64_t) { return stored_as(p); };
  const double device = double(CudaBackend::weight_bytes(spec, full_range(spec), stored));
  const double per_token = double(CudaBackend::weight_bytes_per_token(spec, full_range(spec), stored));
  const std::string name = std::string("plan 30B-A3B ") + (fp8 ? "FP8 128x128" : std::string(dtype_name(dtype)));
  const double ratio = device / file_bytes;
  row(kCheck, name + ": device / file weight bytes", fmt("%.4f", ratio) + fmt(" (%.2f GB file)", file_bytes / 1e9),
      "1 .. 1.02", ratio >= 1.0 && ratio <= 1.02);
  // The device keeps the router in f32 (0.05 GB over 48 layers), the file in `dtype`.
  const double active_ratio = per_token / active;
  row(kCheck, name + ": bytes read per token / attention+router+k experts+head",
      fmt("%.4f", active_ratio) + fmt(" (%.2f GB)", per_token / 1e9), "1 .. 1.03",
      active_ratio >= 1.0 && active_ratio <= 1.03);
  info(kCheck, name + ": projected batch-1 decode on GB10", fmt("<= %.0f tok/s", kGb10CopyGBs * 1e9 / per_token),
       fmt("%.0f GB/s / bytes per token (weights only)", kGb10CopyGBs));
}

#if SPARK_CUDA_EMU
// The layer shapes the byte counts run on: Qwen3-30B-A3B (hidden 2048, 128 SwiGLU experts
// of 768, k = 8) and Nemotron-3-Nano (hidden 2688, 128 squared-ReLU experts of 1856 with
// no gate, k = 6, the sigmoid router).
struct BytesShape {
  const char* name;
  int32_t experts, top_k, hidden, inter;
  bool gated;
  RouterRule rule;
};
constexpr BytesShape kQwen30B{"30B-A3B", 128, 8, 2048, 768, true, RouterRule::SOFTMAX_TOPK};
constexpr BytesShape kNemotronNano{"Nemotron-3-Nano", 128, 6, 2688, 1856, false, RouterRule::SIGMOID_BIAS};
// 30B-A3B's routing (128 experts, k = 8) on experts narrowed to hidden 128 and inter 64, so
// a prefill of 4,096 tokens runs in seconds on the emulator.
constexpr BytesShape kQwen30BNarrow{"30B-A3B-routed 128x64", 128, 8, 128, 64, true, RouterRule::SOFTMAX_TOPK};

// A layer of shape m with every expert in `dtype` on the device, for the byte counts: the
// expert weights a constant pattern (their values do not matter to a count; the router's
// random weights pick the experts), the router and its norm random.
struct BytesLayer {
  cuda::MoeConfig cfg;
  const char* format_name;
  size_t expert_bytes;  // one expert: 3 matrices (2 ungated) and their scales
  DeviceArray<uint8_t> gu, dn, gu_s, dn_s;
  DeviceArray<float> router, norm;
  cuda::ExpertWeights ew;

  BytesLayer(const BytesShape& m, DType dtype)
      : cfg(config_of(m)), format_name(dtype == DType::Q8_0 ? "Q8_0" : dtype == DType::F8_E4M3 ? "FP8 128x128"
                                                                   : dtype == DType::NVFP4     ? "NVFP4"
                                                                                               : "BF16") {
    const int32_t E = m.experts, H = m.hidden, I = m.inter;
    const bool q8 = dtype == DType::Q8_0, fp8 = dtype == DType::F8_E4M3, nv = dtype == DType::NVFP4;
    const size_t matrices = m.gated ? 3 : 2, up_matrices = matrices - 1;
    const size_t gate_up_rows = size_t(E) * up_matrices * I, down_rows = size_t(E) * H;
    // Bytes of a weight (NVFP4: 36 a 64), and of the scales of one expert matrix ([I, H] or
    // [H, I]): Q8_0 one f16 per 32 weights; FP8 one f32 per 128x128 block (30B-A3B: 6 x 16
    // = 96 a matrix); NVFP4 one f32 a row (I of a gate or up, H of a down).
    const double weight_bytes = nv ? 36.0 / 64 : q8 || fp8 ? 1 : 2;
    const size_t matrix_scale_bytes =
        q8 ? size_t(I) * H / 32 * 2 : fp8 ? size_t(cuda::ceil_div(I, 128)) * size_t(cuda::ceil_div(H, 128)) * 4 : 0;
    expert_bytes = nv ? (matrices * size_t(I) * H / 64 * 36 + (up_matrices * size_t(I) + size_t(H)) * 4)
                      : matrices * size_t(I) * H * size_t(weight_bytes) + matrices * matrix_scale_bytes;
    gu = DeviceArray<uint8_t>(nv ? cuda::nvfp4_bytes(int64_t(gate_up_rows), H) : gate_up_rows * H * size_t(weight_bytes));
    dn = DeviceArray<uint8_t>(nv ? cuda::nvfp4_bytes(int64_t(down_rows), I) : down_rows * I * size_t(weight_bytes));
    gu_s = DeviceArray<uint8_t>(std::max<size_t>(1, up_matrices * E * matrix_scale_bytes));
    dn_s = DeviceArray<uint8_t>(std::max<size_t>(1, size_t(E) * matrix_scale_bytes));
    for (auto* a : {&gu, &dn, &gu_s, &dn_s}) CUDA_CHECK(cudaMemset(a->get(), 0x11, a->size()));
    const auto format = q8 ? cuda::WeightFormat::Q8_0 : fp8 ? cuda::WeightFormat::FP8
                        : nv ? cuda::WeightFormat::NVFP4 : cuda::WeightFormat::HALF;
    const int32_t block = fp8 ? 128 : 0;
    const void* gu_scales = nv ? gu.get() + cuda::nvfp4_scales_offset(int64_t(gate_up_rows), H) : gu_s.get();
    const void* dn_scales = nv ? dn.get() + cuda::nvfp4_scales_offset(int64_t(down_rows), I) : dn_s.get();
    ew = {{format, gu.get(), gu_scales, 0, nullptr, block, block}, {format, dn.get(), dn_scales, 0, nullptr, block, block}};
    router = DeviceArray<float>(random_floats(size_t(E) * H, 99, -0.1f, 0.1f));
    norm = DeviceArray<float>(random_floats(size_t(H), 98, 0.5f, 1.5f));
  }
  static cuda::MoeConfig config_of(const BytesShape& m) {
    cuda::MoeConfig c;
    c.shape = {m.experts, m.hidden, m.inter, m.gated};
    c.top_k = m.top_k;
    c.rule = m.rule;
    c.normalize = true;
    return c;
  }
  // Every byte of the experts' weights and scales, for global_reads_watch.
  void watch() const {
    for (const auto* a : {&gu, &dn, &gu_s, &dn_s}) ::emu::global_reads_watch(a->get(), a->size());
  }
  // The distinct experts of a step's selection (the ids the router wrote).
  size_t distinct_experts(const cuda::MoeScratch& s, int32_t tokens) const {
    std::vector<int32_t> ids(size_t(tokens) * size_t(cfg.top_k));
    CUDA_CHECK(cudaMemcpy(ids.data(), s.ids, ids.size() * 4, cudaMemcpyDeviceToHost));
    return std::set<int32_t>(ids.begin(), ids.end()).size();
  }
};

// Bytes a decode step's expert kernels read on a layer of shape m, B tokens a step for B
// in `steps`: router and selection first (not counted), then gate/up and down counted,
// against (distinct experts selected) x (one expert's bytes).
void bytes_table(const BytesShape& m, DType expert_dtype, const std::vector<int32_t>& steps, cudaStream_t stream) {
  const BytesLayer l(m, expert_dtype);
  const cuda::MoeConfig& cfg = l.cfg;
  const int32_t E = m.experts, k = m.top_k, H = m.hidden, I = m.inter;
  DeviceArray<uint8_t> scratch_memory(cuda::MoeScratch::bytes(cfg, kChunk));
  const cuda::MoeScratch s(cfg, kChunk, scratch_memory.get());
  for (int32_t B : steps) {
    const std::vector<float> x = random_floats(size_t(B) * H, uint64_t(B) * 31);
    DeviceArray<bf16> dx(to_half<bf16>(x));
    DeviceArray<float> residual(x);
    cuda::moe_router_logits(residual.get(), l.norm.get(), kEps, l.router.get(), B, H, E, s.logits, stream);
    cuda::moe_route(m.rule, s.logits, nullptr, B, E, k, true, s.ids, s.weights, stream);
    cuda::moe_group(s.ids, B, k, E, cuda::kMoeTileRows, s.groups, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const size_t distinct = l.distinct_experts(s, B);
    ::emu::global_reads_begin();
    cuda::moe_gate_up_gemv(HalfType::BF16, cfg.shape, l.ew, s.groups, dx.get(), B * k, s.act, stream, false);
    cuda::moe_down_gemv(HalfType::BF16, cfg.shape, l.ew, s.groups, s.act, B * k, s.y, stream, false);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const ::emu::GlobalReads reads = ::emu::global_reads_end();
    // Activations: x (B rows) and the gate/up output (B x k rows), each read once.
    const double activations = double(B) * H * 2 + double(B) * k * I * 2;
    const double weights_read = double(reads.total()) - activations;
    const double ratio = weights_read / (double(distinct) * double(l.expert_bytes));
    row(kCheck,
        std::string("bytes ") + m.name + " " + l.format_name + " B=" + std::to_string(B) + ": " +
            std::to_string(distinct) + " experts",
        fmt("%.4f", ratio) + fmt(" (%.1f MB expert weights)", weights_read / 1e6),
        fmt("1 +- 0.03 of %.1f MB", double(distinct) * double(l.expert_bytes) / 1e6), ratio >= 0.97 && ratio <= 1.03);
  }
}

// The expert bytes a prefill step of `tokens` reads from DRAM (GlobalReads::dram_bytes: an
// L2 that keeps what the blocks resident together share, here GB10's 48 SMs x 4 grouped-GEMM
// blocks) through the whole block (moe_forward: router, grouping, grouped GEMMs, weighted
// sum), its scratch sized for `chunk` tokens a pass, against (distinct experts selected) x
// (one expert's bytes). The grouped GEMM's blocks walk the output columns fastest, so the
// row tiles of one expert that re-read a weight tile are a few dozen blocks apart and find it
// in L2: a chunk as large as the step reads each selected expert once. Chunks of a quarter
// of the step read it once a chunk (as 512-token chunks did before the plan sized them),
// which the second row shows the count sees.
void prefill_bytes_rows(const BytesShape& m, DType expert_dtype, int32_t tokens, cudaStream_t stream) {
  constexpr uint32_t kResidentBlocks = 48 * 4;
  const BytesLayer l(m, expert_dtype);
  const std::vector<float> x = random_floats(size_t(tokens) * m.hidden, 77);
  DeviceArray<bf16> dx(to_half<bf16>(x));
  DeviceArray<float> residual(x), out(size_t(tokens) * m.hidden);
  cuda::MoeLayerWeights w;
  w.norm = l.norm.get();
  w.router = l.router.get();
  w.experts = l.ew;
  for (int32_t chunk : {tokens, tokens / 4}) {
    DeviceArray<uint8_t> scratch_memory(cuda::MoeScratch::bytes(l.cfg, chunk));
    const cuda::MoeScratch s(l.cfg, chunk, scratch_memory.get());
    ::emu::global_reads_begin(kResidentBlocks);
    l.watch();
    cuda::moe_forward(HalfType::BF16, l.cfg, w, residual.get(), kEps, dx.get(), tokens, s, out.get(), stream, false,
                      MoePath::GEMM);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const ::emu::GlobalReads reads = ::emu::global_reads_end();
    // The last chunk's selection stands for all: every expert is chosen in any chunk here.
    const size_t distinct = l.distinct_experts(s, std::min(chunk, tokens));
    const double ratio = double(reads.dram_bytes) / (double(distinct) * double(l.expert_bytes));
    const std::string what = std::string("prefill bytes ") + m.name + " " + l.format_name + " T=" +
                             std::to_string(tokens) + ", chunks of " + std::to_string(chunk) + ": " +
                             std::to_string(distinct) + " experts";
    const std::string got = fmt("%.4f", ratio) + fmt(" (%.2f MB from DRAM)", double(reads.dram_bytes) / 1e6);
    if (chunk == tokens) row(kCheck, what, got, "<= 1.05 of the selected experts' bytes", ratio >= 0.97 && ratio <= 1.05);
    else row(kCheck, what, got, "> 1.5: a re-read per chunk is seen", ratio > 1.5);
  }
}

// repeat_layers, which the benchmark below uses to upload 48 layers from 12, on the tiny
// Qwen3-MoE with 4 layers from its first 2 (Q8_0; every layer MoE, as the 30B-A3B's, where
// the fixture keeps layer 1 dense): every tensor of the 4-layer model is there, and a CUDA
// prefill of it gives the CPU backend's logits (within the BF16 limit).
void repeat_layers_row() {
  Config c = config_for_model("tests/golden/models/qwen3_moe");
  c.model.load_format = "dummy";
  ModelSpec full = inspect_model(c).spec;
  full.mlp_only_layers.clear();
  ModelSpec built = full;
  full.num_layers = 4;
  built.num_layers = 2;
  const Weights w =
      repeat_layers(make_dummy_weights(built, full_range(built), DType::Q8_0), built.num_layers, full.num_layers);
  size_t missing = 0;
  for (const TensorSpec& t : expected_tensors(full, full_range(full))) missing += w.find(t.name) == nullptr;
  CudaOptions o;
  o.max_num_seqs = 1;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 64;
  o.block_size = 16;
  CudaBackend gpu(full, bind_stage(full, w), o);
  CpuBackend cpu(full, bind_stage(full, w), 0);
  ForwardResult out[2];
  int i = 0;
  for (Backend* b : {static_cast<Backend*>(&gpu), static_cast<Backend*>(&cpu)}) {
    b->init_kv_cache(4, 16);
    b->forward(prefill_batch(9, 4), nullptr, out[i++]);
  }
  row(kCheck, "repeat_layers: 4 layers from 2 (tiny Qwen3-MoE, Q8_0): tensors missing", std::to_string(missing), "0",
      missing == 0);
  error_row(kCheck, "repeat_layers: 4 layers from 2: CUDA vs CPU logits", rel_error(out[1].logits, out[0].logits),
            kBf16Limit);
}
#else
// ---- benchmarks (a GPU only) --------------------------------------------------------

// Decode and prefill tok/s of a Qwen3-30B-A3B-shaped model (dummy weights in `dtype`, FP8
// as Qwen3-30B-A3B-FP8 keeps it (qwen3_30b_spec, stored_dtype); the host makes 12 layers
// and repeat_layers uploads them as all 48, so a step runs and times every layer) at batch
// 1, 16 and 64, context 512, and prefills of 512 and 2,048 tokens, beside the copy
// bandwidth and the batch-1 bound it gives for the bytes a token reads.
void decode_benchmark(DType dtype, double copy_gbs) {
  const ModelSpec full = qwen3_30b_spec(dtype);
  ModelSpec built = full;
  built.num_layers = 12;
  const int max_seqs = 64, blocks_per_seq = 2048 / 16;
  CudaOptions o;
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = 2048;
  o.max_model_len = blocks_per_seq * 16;
  o.block_size = 16;
  std::unique_ptr<CudaBackend> gpu;
  {
    const Weights w = repeat_layers(make_dummy_weights(built, full_range(built), dtype), built.num_layers,
                                    full.num_layers);
    gpu = std::make_unique<CudaBackend>(full, bind_stage(full, w), o);
  }
  gpu->init_kv_cache(int64_t(max_seqs) * blocks_per_seq, 16);
  const StoredDType stored = [dtype](Part p, int64_t) { return stored_dtype(dtype, p); };
  const double per_token = double(CudaBackend::weight_bytes_per_token(full, full_range(full), stored));
  const std::string format = dtype == DType::F8_E4M3 ? "FP8 128x128" : std::string(dtype_name(dtype));
  step_rate_rows(kCheck, "30B-A3B " + format, *gpu, blocks_per_seq, 16, per_token, copy_gbs, ", 48 layers");
}
#endif

void run() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  router_case(RouterRule::SOFTMAX_TOPK, 8, 2, true, false, stream, 1);
  router_case(RouterRule::SOFTMAX_TOPK, 128, 8, true, false, stream, 2);
  router_case(RouterRule::SOFTMAX_TOPK, 60, 4, false, false, stream, 3);
  router_case(RouterRule::TOPK_SOFTMAX, 32, 4, false, true, stream, 4);
  router_case(RouterRule::TOPK_SOFTMAX, 128, 4, false, true, stream, 5);
  router_case(RouterRule::TOPK_SOFTMAX, 256, 32, false, false, stream, 6);
  router_case(RouterRule::SIGMOID_BIAS, 128, 6, true, true, stream, 7, 2.5f);  // Nemotron-3-Nano's
  router_case(RouterRule::SIGMOID_BIAS, 8, 2, true, true, stream, 8, 2.5f);    // the test fixture's
  router_case(RouterRule::SIGMOID_BIAS, 60, 4, false, true, stream, 9);
  router_case(RouterRule::SIGMOID_BIAS, 256, 32, true, false, stream, 10, 2.5f);
  // The decode steps' fused selection + grouping: the models' shapes, odd expert counts,
  // k up to 32, tiles of 64 (kMoeTileRows) and of 3 (tiles straddling many experts).
  const std::vector<int32_t> decode_sizes = {1, 2, 3, 7, 13, 14, 31, 32, 33, 63, 64};
  route_group_case(RouterRule::SOFTMAX_TOPK, 128, 8, true, false, false, 64, decode_sizes, stream, 51);
  route_group_case(RouterRule::TOPK_SOFTMAX, 32, 4, false, true, false, 64, decode_sizes, stream, 52);
  route_group_case(RouterRule::SIGMOID_BIAS, 128, 6, true, true, false, 64, decode_sizes, stream, 53, 2.5f);
  route_group_case(RouterRule::SOFTMAX_TOPK, 61, 5, false, false, true, 3, decode_sizes, stream, 54);
  route_group_case(RouterRule::TOPK_SOFTMAX, 7, 3, false, true, false, 3, decode_sizes, stream, 55);
  route_group_case(RouterRule::SIGMOID_BIAS, 97, 32, false, true, false, 64, {1, 14, 33, 64}, stream, 56);
  route_group_case(RouterRule::TOPK_SOFTMAX, 256, 32, false, false, false, 3, {1, 14, 64}, stream, 57);
  route_group_case(RouterRule::SOFTMAX_TOPK, 33, 32, true, false, false, 64, {1, 14, 64}, stream, 58);
  route_group_case(RouterRule::SOFTMAX_TOPK, 1, 1, true, false, false, 64, {1, 64}, stream, 59);
  // ASan's run (4x slower) checks the kernels' bounds on fewer sizes; the plain one runs all.
  const std::vector<int32_t> tokens = kSanitized ? std::vector<int32_t>{2, 64, 300}
                                                 : std::vector<int32_t>{1, 2, 7, 16, 64, 300};
  block_case<bf16>(DType::BF16, kSanitized ? tokens : std::vector<int32_t>{1, 2, 7, 16, 64, 300, 4096}, stream, 11);
  block_case<bf16>(DType::Q8_0, tokens, stream, 12);
  block_case<f16>(DType::F16, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64}, stream, 13);
  block_case<f16>(DType::Q8_0, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64}, stream, 14);
  block_case<bf16>(DType::Q4_K, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 16, 64, 300}, stream, 15);
  block_case<bf16>(DType::Q6_K, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 16, 300}, stream, 16);
  // Q5_0 and Q5_1: Gemma-4-26B-A4B's Q4_K_M and Q5_K_M experts' down projections (704 columns).
  block_case<bf16>(DType::Q5_0, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64, 300}, stream, 41);
  block_case<f16>(DType::Q5_1, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 64}, stream, 42);
  block_case<bf16>(DType::F8_E4M3, tokens, stream, 17, 128);
  block_case<bf16>(DType::F8_E4M3, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64}, stream, 18, 0);
  block_case<bf16>(DType::NVFP4, tokens, stream, 19);
  block_case<f16>(DType::NVFP4, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64}, stream, 20);
  // Nemotron-H: every format at every size in the plain run (the GEMVs' 16-row passes split
  // at 64 tokens x 6 / 16 experts, the GEMM's 64-row tiles at 300); LatentMoE with a
  // router wider than the experts, down to the fixture's 16-wide latent.
  const std::vector<int32_t> all = {1, 2, 7, 16, 64, 300};
  const std::vector<int32_t> few = kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 7, 64, 300};
  const std::vector<int32_t> some = kSanitized ? std::vector<int32_t>{2, 300} : all;
  nemotron_case<bf16>(DType::BF16, 256, 96, 0, some, stream, 21);
  nemotron_case<f16>(DType::F16, 256, 96, 0, some, stream, 22);
  nemotron_case<bf16>(DType::Q8_0, 256, 96, 0, some, stream, 23);
  nemotron_case<f16>(DType::Q8_0, 256, 96, 0, kSanitized ? std::vector<int32_t>{7} : all, stream, 24);
  nemotron_case<bf16>(DType::Q4_K, 256, 256, 0, kSanitized ? std::vector<int32_t>{7} : all, stream, 25);
  nemotron_case<f16>(DType::Q6_K, 256, 256, 0, few, stream, 26);
  nemotron_case<bf16>(DType::F8_E4M3, 256, 192, 0, few, stream, 27);
  nemotron_case<bf16>(DType::NVFP4, 256, 192, 0, few, stream, 28);
  nemotron_case<f16>(DType::NVFP4, 64, 192, 256, kSanitized ? std::vector<int32_t>{7} : std::vector<int32_t>{1, 64},
                     stream, 29);
  nemotron_case<bf16>(DType::BF16, 16, 64, 256, some, stream, 31);
  nemotron_case<f16>(DType::F16, 16, 64, 256, some, stream, 32);
  nemotron_case<bf16>(DType::Q8_0, 64, 96, 256, some, stream, 33);
  nemotron_case<f16>(DType::Q8_0, 64, 96, 256, kSanitized ? std::vector<int32_t>{7} : all, stream, 34);
  nemotron_case<bf16>(DType::Q4_K, 256, 256, 512, few, stream, 35);
  batch_invariance(stream);
  folded_sum_case(RouterRule::SOFTMAX_TOPK, stream);
  folded_sum_case(RouterRule::TOPK_SOFTMAX, stream);
  plan_rows(DType::BF16);
  plan_rows(DType::Q8_0);
  plan_rows(DType::Q4_K);
  plan_rows(DType::F8_E4M3);
#if SPARK_CUDA_EMU && defined(__SANITIZE_ADDRESS__)  // kSanitized
  // Minutes under ASan; the kernels' bounds are checked by the block cases above.
  skip_row(kCheck, "bytes 30B-A3B B=1, 4, 16 and Nemotron-3-Nano B=1, 4",
           "ASan build: the plain emulated build prints them");
#elif SPARK_CUDA_EMU
  repeat_layers_row();
  // BF16 at B = 1 only, FP8 at B = 1 and 4: the same kernels and grouping as Q8_0's
  // rows, and 16 steps of BF16 experts (760 MB a step) would double the check's time.
  bytes_table(kQwen30B, DType::Q8_0, {1, 4, 16}, stream);
  bytes_table(kQwen30B, DType::F8_E4M3, {1, 4}, stream);
  bytes_table(kQwen30B, DType::NVFP4, {1, 4, 16}, stream);
  bytes_table(kQwen30B, DType::BF16, {1}, stream);
  bytes_table(kNemotronNano, DType::Q8_0, {1, 4}, stream);
  bytes_table(kNemotronNano, DType::BF16, {1}, stream);
  prefill_bytes_rows(kQwen30BNarrow, DType::BF16, 4096, stream);
  prefill_bytes_rows(kQwen30BNarrow, DType::Q8_0, 4096, stream);
#else
  const double copy_gbs = copy_bandwidth_gbs();
  info(kCheck, "device copy bandwidth (read+write)", fmt("%.0f GB/s", copy_gbs), "2 GiB cudaMemcpy D2D");
  for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_K, DType::F8_E4M3}) decode_benchmark(dtype, copy_gbs);
#endif
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("moe", [] { spark::gpu_check::run(); });
}
