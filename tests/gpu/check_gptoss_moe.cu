// check_gptoss_moe.cu — gpt-oss's mixture-of-experts block on the device (moe.h) against
// the CPU backend (cpu/moe.h): MXFP4 experts kept packed (mxfp4.h, weight_readers.cuh's
// Mxfp4Rows), the router's bias with top-k then softmax, a bias on every expert
// projection and the clamped SwiGLU (moe_activation.cuh), at 1, 2, 7, 16, 64 and 300
// tokens through both expert paths (decode GEMVs, grouped GEMM); under the emulator, the
// bytes a decode step of B = 1, 4, 16 tokens reads on a gpt-oss-20b-shaped layer against
// (distinct experts selected) x (one expert's bytes: MXFP4 matrices and f32 biases); on a
// GPU, decode tok/s of a gpt-oss-20b-shaped dummy model at batch 1, 16 and 64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu/moe.h"
#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/moe.h"
#include "engine/backend/cuda/mxfp4.h"
#include "engine/model/model_loader.h"
#include "engine/model/quant.h"
#include "engine/model/stage_weights.h"
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

const char* kCheck = "gptoss_moe";
// The MoE scratch's chunk (moe.h): 300 tokens run as chunks of 128, 128 and 44.
constexpr int32_t kChunk = 128;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr float kEps = 1e-5f;
constexpr float kAlpha = 1.702f;

// Host bytes and the tensor that describes them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  Tensor tensor;
  HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> b) : bytes(std::move(b)) {
    tensor.name = "w";
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
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

HostTensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return HostTensor(DType::F32, std::move(shape), std::move(b));
}

HostTensor bf16_tensor(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const bf16 h = __float2bfloat16(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return HostTensor(DType::BF16, {rows, cols}, std::move(b));
}

// Random GGUF MXFP4 blocks: random codes (every E2M1 value, both signs) and exponents
// e_lo .. e_lo + 2, so values are up to 6 x 2^(e_lo + 2 - 127).
HostTensor random_mxfp4(int64_t rows, int64_t cols, int e_lo, uint64_t seed) {
  std::vector<uint8_t> b(dtype_nbytes(DType::MXFP4, rows * cols, cols));
  auto* blocks = reinterpret_cast<BlockMXFP4*>(b.data());
  for (size_t i = 0; i < b.size() / sizeof(BlockMXFP4); ++i) {
    const uint64_t r = splitmix64(seed * 0x9E3779B97F4A7C15ull + i);
    blocks[i].e = uint8_t(e_lo + int(r % 3));
    for (int j = 0; j < 16; ++j) blocks[i].qs[j] = uint8_t(splitmix64(r + uint64_t(j)));
  }
  return HostTensor(DType::MXFP4, {rows, cols}, std::move(b));
}

// One gpt-oss MoE layer: ffn_norm, router (BF16 in the file, f32 on the device) and its
// bias, MXFP4 experts stacked as moe.h reads them, their f32 biases, and the CPU's view.
struct Layer {
  cuda::MoeConfig cfg;
  float limit;
  std::vector<float> norm, router_f32, router_bias, gate_up_bias, down_bias;
  HostTensor router, router_bias_t, gate_up, down, gate_up_bias_t, down_bias_t;
  cpu::MoeWeights cpu;
  std::vector<Tensor> views;  // backing for cpu's pointers

  static std::vector<float> bf16_rounded(std::vector<float> v) {
    for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
    return v;
  }
  Layer(int32_t experts, int32_t top_k, int32_t hidden, int32_t inter, float swiglu_limit, int e_lo, uint64_t seed)
      : limit(swiglu_limit),
        norm(random_floats(size_t(hidden), seed + 3, 0.5f, 1.5f)),
        router_f32(bf16_rounded(random_floats(size_t(experts) * hidden, seed, -0.25f, 0.25f))),
        router_bias(random_floats(size_t(experts), seed + 4, -1.0f, 1.0f)),
        gate_up_bias(random_floats(size_t(experts) * 2 * inter, seed + 5, -0.5f, 0.5f)),
        down_bias(random_floats(size_t(experts) * hidden, seed + 6, -0.5f, 0.5f)),
        router(bf16_tensor(router_f32, experts, hidden)),
        router_bias_t(f32_tensor(router_bias, {experts})),
        gate_up(random_mxfp4(int64_t(experts) * 2 * inter, hidden, e_lo, seed + 1)),
        down(random_mxfp4(int64_t(experts) * hidden, inter, e_lo, seed + 2)),
        gate_up_bias_t(f32_tensor(gate_up_bias, {int64_t(experts) * 2 * inter})),
        down_bias_t(f32_tensor(down_bias, {int64_t(experts) * hidden})) {
    cfg.shape = {experts, hidden, inter};
    cfg.top_k = top_k;
    cfg.rule = RouterRule::TOPK_SOFTMAX;
    cfg.normalize = false;
    views.reserve(size_t(experts) * 6);
    auto bias_view = [](const HostTensor& h, int64_t at, int64_t n) {
      Tensor t = h.tensor;
      t.data = h.bytes.data() + size_t(at) * 4;
      t.shape = {n};
      t.nbytes = size_t(n) * 4;
      return t;
    };
    for (int32_t e = 0; e < experts; ++e) {
      views.push_back(gate_up.rows(int64_t(e) * 2 * inter, inter));
      views.push_back(gate_up.rows(int64_t(e) * 2 * inter + inter, inter));
      views.push_back(down.rows(int64_t(e) * hidden, hidden));
      views.push_back(bias_view(gate_up_bias_t, int64_t(e) * 2 * inter, inter));
      views.push_back(bias_view(gate_up_bias_t, int64_t(e) * 2 * inter + inter, inter));
      views.push_back(bias_view(down_bias_t, int64_t(e) * hidden, hidden));
    }
    cpu.router = &router.tensor;
    cpu.router_bias = &router_bias_t.tensor;
    for (int32_t e = 0; e < experts; ++e) {
      const Tensor* v = &views[size_t(e) * 6];
      cpu.gate.push_back(v);
      cpu.up.push_back(v + 1);
      cpu.down.push_back(v + 2);
      cpu.gate_bias.push_back(v + 3);
      cpu.up_bias.push_back(v + 4);
      cpu.down_bias.push_back(v + 5);
    }
    cpu.top_k = top_k;
    cpu.softmax_after_topk = true;
    cpu.swiglu_limit = swiglu_limit;
    cpu.swiglu_alpha = kAlpha;
  }
};

// An MXFP4 stack on the device as DeviceWeights lays it out (codes, then scales).
struct DeviceMxfp4 {
  DeviceArray<uint8_t> memory;
  cuda::DeviceMatrix matrix;
  explicit DeviceMxfp4(const Tensor& t) : memory(cuda::mxfp4_bytes(t.rows(), t.cols())) {
    uint8_t* scales = memory.get() + cuda::mxfp4_scales_offset(t.rows(), t.cols());
    cuda::upload_mxfp4(t, memory.get(), scales);
    matrix = {cuda::WeightFormat::MXFP4, memory.get(), scales};
  }
};

struct DeviceLayer {
  DeviceArray<float> norm, router, router_bias, gate_up_bias, down_bias;
  DeviceMxfp4 gate_up, down;
  cuda::MoeLayerWeights w;
  DeviceArray<uint8_t> scratch_memory;
  cuda::MoeScratch scratch;
  explicit DeviceLayer(const Layer& l)
      : norm(l.norm),
        router(l.router_f32),
        router_bias(l.router_bias),
        gate_up_bias(l.gate_up_bias),
        down_bias(l.down_bias),
        gate_up(l.gate_up.tensor),
        down(l.down.tensor),
        scratch_memory(cuda::MoeScratch::bytes(l.cfg, kChunk)),
        scratch(l.cfg, kChunk, scratch_memory.get()) {
    w.norm = norm.get();
    w.router = router.get();
    w.router_bias = router_bias.get();
    w.experts = {gate_up.matrix, down.matrix, {gate_up_bias.get(), down_bias.get(), l.limit, kAlpha}};
  }
};

struct Inputs {
  std::vector<float> residual, normed;
};
Inputs make_inputs(const Layer& l, int32_t tokens, uint64_t seed) {
  const int32_t H = l.cfg.shape.hidden;
  Inputs in{random_floats(size_t(tokens) * H, seed, -2.0f, 2.0f), std::vector<float>(size_t(tokens) * H)};
  for (int32_t t = 0; t < tokens; ++t)
    cpu::rms_norm(in.residual.data() + size_t(t) * H, l.norm.data(), H, kEps, in.normed.data() + size_t(t) * H);
  return in;
}

template <typename T>
std::vector<float> run_device(const Layer& l, DeviceLayer& d, const Inputs& in, int32_t tokens, MoePath path,
                              cudaStream_t stream) {
  DeviceArray<T> dx(to_half<T>(in.normed));
  DeviceArray<float> residual(in.residual);
  DeviceArray<float> out(size_t(tokens) * size_t(l.cfg.shape.hidden));
  out.poison();
  d.scratch_memory.poison();
  cuda::moe_forward(half_type_of<T>(), l.cfg, d.w, residual.get(), kEps, dx.get(), tokens, d.scratch, out.get(), stream,
                    false, path);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out.download();
}

// The share of the CPU's gate and up pre-activations (after their biases) beyond the
// clamp, over every expert for every token: the rows below mean nothing if none is.
double clamped_share(const Layer& l, const Inputs& in, int32_t tokens) {
  const int32_t H = l.cfg.shape.hidden, I = l.cfg.shape.inter;
  std::vector<float> w(static_cast<size_t>(H));
  int64_t beyond = 0, all = 0;
  for (int32_t e = 0; e < l.cfg.shape.experts; e += 7)
    for (int32_t r = 0; r < 2 * I; ++r) {
      dequantize_tensor_row(l.gate_up.tensor, int64_t(e) * 2 * I + r, w.data());
      for (int32_t t = 0; t < tokens; ++t) {
        float dot = l.gate_up_bias[size_t(e) * 2 * I + size_t(r)];
        for (int32_t c = 0; c < H; ++c) dot += w[size_t(c)] * in.normed[size_t(t) * H + size_t(c)];
        beyond += r < I ? dot > l.limit : std::fabs(dot) > l.limit;
        ++all;
      }
    }
  return double(beyond) / double(all);
}

template <typename T>
void block_case(const std::vector<int32_t>& token_counts, cudaStream_t stream, uint64_t seed) {
  // gpt-oss's 4 of E experts; inter not a multiple of 64, so GEMM column tiles are partial.
  const int32_t experts = 32, top_k = 4, hidden = 256, inter = 160;
  const float limit = 2.0f;  // below gpt-oss's 7 so that a good share of these values clamp
  const Layer l(experts, top_k, hidden, inter, limit, 121, seed);
  DeviceLayer d(l);
  ThreadPool pool(2);
  const std::string name = std::string("MXFP4 experts + biases, clamped SwiGLU, ") + half_name<T>() +
                           " E=32 k=4 h=256 i=160";
  {
    const Inputs in = make_inputs(l, 4, seed);
    const double share = clamped_share(l, in, 4);
    row(kCheck, name + ": gate/up values beyond the clamp (cpu)", fmt("%.2f", share), "0.05 .. 0.95",
        share >= 0.05 && share <= 0.95);
  }
  for (int32_t tokens : token_counts) {
    const Inputs in = make_inputs(l, tokens, seed * 7 + uint64_t(tokens));
    std::vector<float> want(in.normed.size());
    cpu::moe_ffn(pool, l.cpu, in.normed.data(), tokens, hidden, want.data());
    for (MoePath path : {MoePath::GEMV, MoePath::GEMM}) {
      const std::vector<float> got = run_device<T>(l, d, in, tokens, path, stream);
      error_row(kCheck,
                name + " T=" + std::to_string(tokens) + (path == MoePath::GEMV ? " gemv" : " grouped gemm") + " vs cpu",
                rel_error(want, got), half_limit<T>());
    }
  }
}

#if SPARK_CUDA_EMU
// Bytes a decode step's expert kernels read on a gpt-oss-20b-shaped layer (hidden 2880,
// 32 experts of 2880, k = 4): one expert is 3 x 2880 x 2880 MXFP4 values (17 bytes per 32:
// 13.2 MB) plus its f32 biases (2 x 2880 + 2880: 34.6 KB). Router and selection first
// (not counted), then gate/up and down counted.
void bytes_table(cudaStream_t stream) {
  const int32_t E = 32, k = 4, H = 2880, I = 2880;
  cuda::MoeConfig cfg;
  cfg.shape = {E, H, I};
  cfg.top_k = k;
  cfg.rule = RouterRule::TOPK_SOFTMAX;
  const size_t expert_bytes = size_t(3) * I * H / 32 * 17 + size_t(2 * I + H) * 4;
  DeviceArray<uint8_t> gu(cuda::mxfp4_bytes(int64_t(E) * 2 * I, H)), dn(cuda::mxfp4_bytes(int64_t(E) * H, I));
  for (auto* a : {&gu, &dn}) CUDA_CHECK(cudaMemset(a->get(), 0x7A, a->size()));
  DeviceArray<float> gu_bias(random_floats(size_t(E) * 2 * I, 97)), dn_bias(random_floats(size_t(E) * H, 96));
  cuda::ExpertWeights ew{{cuda::WeightFormat::MXFP4, gu.get(), gu.get() + cuda::mxfp4_scales_offset(int64_t(E) * 2 * I, H)},
                         {cuda::WeightFormat::MXFP4, dn.get(), dn.get() + cuda::mxfp4_scales_offset(int64_t(E) * H, I)},
                         {gu_bias.get(), dn_bias.get(), 7.0f, kAlpha}};
  DeviceArray<float> router(random_floats(size_t(E) * H, 99, -0.1f, 0.1f)), norm(random_floats(size_t(H), 98, 0.5f, 1.5f));
  DeviceArray<float> router_bias(random_floats(size_t(E), 95));
  DeviceArray<uint8_t> scratch_memory(cuda::MoeScratch::bytes(cfg, kChunk));
  const cuda::MoeScratch s(cfg, kChunk, scratch_memory.get());
  for (int32_t B : {1, 4, 16}) {
    const std::vector<float> x = random_floats(size_t(B) * H, uint64_t(B) * 31);
    DeviceArray<bf16> dx(to_half<bf16>(x));
    DeviceArray<float> residual(x);
    cuda::moe_router_logits(residual.get(), norm.get(), kEps, router.get(), B, H, E, s.logits, stream);
    cuda::moe_route(cfg.rule, s.logits, router_bias.get(), B, E, k, false, s.ids, s.weights, stream);
    cuda::moe_group(s.ids, B, k, E, cuda::kMoeTileRows, s.groups, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int32_t> ids(size_t(B) * k);
    CUDA_CHECK(cudaMemcpy(ids.data(), s.ids, ids.size() * 4, cudaMemcpyDeviceToHost));
    const size_t distinct = std::set<int32_t>(ids.begin(), ids.end()).size();
    ::emu::global_reads_begin();
    cuda::moe_gate_up_gemv(HalfType::BF16, cfg.shape, ew, s.groups, dx.get(), B * k, s.act, stream, false);
    cuda::moe_down_gemv(HalfType::BF16, cfg.shape, ew, s.groups, s.act, B * k, s.y, stream, false);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const ::emu::GlobalReads reads = ::emu::global_reads_end();
    const double activations = double(B) * H * 2 + double(B) * k * I * 2;  // x and the SwiGLU output, once each
    const double weights_read = double(reads.total()) - activations;
    const double ratio = weights_read / (double(distinct) * double(expert_bytes));
    row(kCheck, "bytes gpt-oss-20b MXFP4 B=" + std::to_string(B) + ": " + std::to_string(distinct) + " experts",
        fmt("%.4f", ratio) + fmt(" (%.1f MB expert weights)", weights_read / 1e6),
        fmt("1 +- 0.03 of %.1f MB", double(distinct) * double(expert_bytes) / 1e6), ratio >= 0.97 && ratio <= 1.03);
  }
}
#else
// ---- benchmarks (a GPU only) --------------------------------------------------------

// Decode tok/s of a gpt-oss-20b-shaped model (tests/golden/configs/gpt_oss_20b, the
// published config) with dummy weights (make_dummy_weights: MXFP4 experts from
// quantize_mxfp4, the other matrices in `others`), all 24 layers, at batch 1, 16 and 64,
// context 512 (the sliding layers see their last 128 tokens), beside the batch-1 bound of
// the bytes a token reads. BF16, as the Hugging Face checkpoint: 12.8 GiB on the device,
// 3.7 GB a token (attention 1.3 GB, 4 experts a layer 1.3 GB, LM head 1.2 GB). Q8_0, as a
// GGUF may keep the attention, embedding and head: about 2.6 GB a token.
void decode_benchmark(DType others, double copy_gbs) {
  Config c = config_for_model("tests/golden/configs/gpt_oss_20b");
  c.model.load_format = "dummy";
  ModelInfo info = inspect_model(c);
  info.weight_dtype = others;
  const ModelSpec& spec = info.spec;
  const int max_seqs = 64, block = 16, blocks_per_seq = 2048 / block;
  CudaOptions o;
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = 2048;
  o.max_model_len = blocks_per_seq * block;
  o.block_size = block;
  std::unique_ptr<CudaBackend> gpu;
  {
    const Weights w = load_stage_weights(info, full_range(spec));  // host copy freed once uploaded
    gpu = std::make_unique<CudaBackend>(spec, bind_stage(spec, w), o);
  }
  gpu->init_kv_cache(int64_t(max_seqs) * blocks_per_seq, block);
  const StageFootprint f = stage_footprint(c, info, full_range(spec), "cuda");
  step_rate_rows(kCheck, "gpt-oss-20b MXFP4 experts, " + std::string(dtype_name(others)) + " attention and head", *gpu,
                 blocks_per_seq, block, double(f.weight_bytes_per_token), copy_gbs, ", 24 layers");
}
#endif

// The upload takes block scales up to 2^113 and infinity (255), and refuses 2^114 .. 2^127,
// which the device decode's folded 2^14 (weight_readers.cuh's Mxfp4Rows) cannot hold, naming
// the tensor.
void scale_range_row() {
  HostTensor t = random_mxfp4(2, 64, 120, 5);
  t.tensor.name = "blk.0.ffn_down_exps.weight";
  auto* blocks = reinterpret_cast<BlockMXFP4*>(t.bytes.data());
  DeviceArray<uint8_t> memory(cuda::mxfp4_bytes(2, 64));
  auto upload = [&](uint8_t e) -> std::string {
    blocks[3].e = e;
    try {
      cuda::upload_mxfp4(t.tensor, memory.get(), memory.get() + cuda::mxfp4_scales_offset(2, 64));
      return "taken";
    } catch (const InputError& err) {
      return err.what();
    }
  };
  const std::string e240 = upload(240), e255 = upload(255), e241 = upload(241), e254 = upload(254);
  const bool named = e241.find("blk.0.ffn_down_exps.weight") != std::string::npos &&
                     e241.find("2^114") != std::string::npos && e254.find("2^127") != std::string::npos;
  row(kCheck, "MXFP4 upload: block scales 2^113 and inf taken, 2^114 and 2^127 refused by name",
      e240 + ", " + e255 + "; " + e241, "taken, taken; the tensor and scale named",
      e240 == "taken" && e255 == "taken" && named);
}

void run() {
  scale_range_row();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  block_case<bf16>(kSanitized ? std::vector<int32_t>{2, 64, 300} : std::vector<int32_t>{1, 2, 7, 16, 64, 300}, stream,
                   21);
  block_case<f16>({7}, stream, 22);
#if SPARK_CUDA_EMU && defined(__SANITIZE_ADDRESS__)
  skip_row(kCheck, "bytes gpt-oss-20b MXFP4 B=1, 4, 16", "ASan build: the plain emulated build prints them");
#elif SPARK_CUDA_EMU
  bytes_table(stream);
#else
  const double copy_gbs = copy_bandwidth_gbs();
  info(kCheck, "device copy bandwidth (read+write)", fmt("%.0f GB/s", copy_gbs), "2 GiB cudaMemcpy D2D");
  for (DType others : {DType::BF16, DType::Q8_0}) decode_benchmark(others, copy_gbs);
#endif
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spark::gpu_check

int main() {
  return spark::gpu_check::run_main("gptoss_moe", [] { spark::gpu_check::run(); });
}
