// device_weights.cu — checks a stage's tensors against the spec, converts them to the
// compute type on the host (dequantizing GGUF blocks) and uploads them into one device
// allocation.
#include "engine/backend/cuda/device_weights.h"

#include <algorithm>
#include <string>

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/util/thread_pool.h"

namespace spark::cuda {

namespace {

constexpr size_t kAlign = 256;  // every piece starts on a 256-byte boundary (vector loads, cuBLASLt)

// One device array made of source tensors stacked along rows (q, k and v into qkv).
struct Piece {
  std::vector<const Tensor*> sources;  // empty when only the sizes matter (the memory plan)
  std::vector<int64_t> rows;           // rows of each source; for a vector, each source's length
  int64_t cols = 0;                    // 1 for a vector
  bool f32 = false;                    // f32 vector, else a 16-bit matrix
  const void** dst = nullptr;
  size_t offset = 0;

  int64_t total_rows() const {
    int64_t n = 0;
    for (int64_t r : rows) n += r;
    return n;
  }
  size_t bytes() const {
    size_t b = size_t(total_rows()) * size_t(cols) * (f32 ? 4 : 2);
    return (b + kAlign - 1) / kAlign * kAlign;
  }
};

template <typename T>
const void** slot(const T*& p) {
  return reinterpret_cast<const void**>(&p);
}
const void** slot(const void*& p) { return &p; }

// The pieces of `range` in upload order. With `stage` and `w`, the pieces carry their
// source tensors and `w` receives the device pointers; with both null only the sizes
// matter (the memory plan).
std::vector<Piece> layout(const ModelSpec& s, LayerRange range, const StageWeights* stage, DeviceWeights* w) {
  static const void* sink = nullptr;
  const int64_t H = s.hidden_size, hd = s.head_dim, nh = s.num_heads, nkv = s.num_kv_heads, I = s.intermediate_size;
  std::vector<Piece> out;
  auto matrix = [&](std::vector<const Tensor*> from, std::vector<int64_t> rows, int64_t cols, const void** d) {
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(rows), cols, false, d});
  };
  auto vec = [&](std::vector<const Tensor*> from, std::vector<int64_t> lengths, const void** d) {
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(lengths), 1, true, d});
  };
  if (range.first_layer == 0)
    matrix({stage ? stage->embedding : nullptr}, {s.vocab_size}, H, w ? slot(w->embedding) : &sink);
  if (w) w->layers.assign(size_t(range.last_layer - range.first_layer), DeviceLayer{});
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    const size_t index = size_t(l - range.first_layer);
    DeviceLayer* L = w ? &w->layers[index] : nullptr;
    auto d = [&](auto member) { return L ? slot(L->*member) : &sink; };
    auto t = [&](Part part) { return stage ? stage->layers[index].find(part) : nullptr; };
    matrix({t(Part::Q), t(Part::K), t(Part::V)}, {nh * hd, nkv * hd, nkv * hd}, H, d(&DeviceLayer::qkv));
    if (s.attention_bias)
      vec({t(Part::Q_BIAS), t(Part::K_BIAS), t(Part::V_BIAS)}, {nh * hd, nkv * hd, nkv * hd},
          d(&DeviceLayer::qkv_bias));
    if (s.qk_norm) {
      vec({t(Part::Q_NORM)}, {hd}, d(&DeviceLayer::q_norm));
      vec({t(Part::K_NORM)}, {hd}, d(&DeviceLayer::k_norm));
    }
    vec({t(Part::ATTN_NORM)}, {H}, d(&DeviceLayer::attn_norm));
    vec({t(Part::FFN_NORM)}, {H}, d(&DeviceLayer::ffn_norm));
    matrix({t(Part::O)}, {H}, nh * hd, d(&DeviceLayer::o));
    matrix({t(Part::GATE), t(Part::UP)}, {I, I}, H, d(&DeviceLayer::gate_up));
    matrix({t(Part::DOWN)}, {H}, I, d(&DeviceLayer::down));
  }
  if (range.last_layer == s.num_layers) {
    vec({stage ? stage->final_norm : nullptr}, {H}, w ? slot(w->final_norm) : &sink);
    // Tied models reuse the embedding; a stage without layer 0 loads it as its head.
    if (!s.tie_word_embeddings || range.first_layer != 0)
      matrix({stage ? stage->lm_head : nullptr}, {s.vocab_size}, H, w ? slot(w->lm_head) : &sink);
  }
  size_t offset = 0;
  for (Piece& piece : out) {
    piece.offset = offset;
    offset += piece.bytes();
  }
  return out;
}

// Converts rows [0, t.rows()) of t to T (f32 or a 16-bit type) in chunks and copies them to dst.
template <typename T>
void upload_as(const Tensor& t, char* dst, ThreadPool& pool) {
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(64) << 20) / (cols * 4));
  std::vector<float> f(size_t(std::min(rows, chunk_rows) * cols));
  std::vector<T> out(f.size());
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = f.data() + r * cols;
        cpu::decode_row(t, r0 + r, row);
        for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = static_cast<T>(row[c]);
      }
    });
    CUDA_CHECK(cudaMemcpy(dst + size_t(r0 * cols) * sizeof(T), out.data(), size_t(n * cols) * sizeof(T),
                          cudaMemcpyHostToDevice));
  }
}

void upload(const Tensor& t, bool f32, HalfType type, char* dst, ThreadPool& pool) {
  const DType native = type == HalfType::F16 ? DType::F16 : DType::BF16;
  if (!f32 && t.dtype == native) {  // already the device format: straight from the mapping
    CUDA_CHECK(cudaMemcpy(dst, t.data, size_t(t.numel()) * 2, cudaMemcpyHostToDevice));
    return;
  }
  if (f32) return upload_as<float>(t, dst, pool);
  if (type == HalfType::F16) return upload_as<f16>(t, dst, pool);
  upload_as<bf16>(t, dst, pool);
}

}  // namespace

uint64_t DeviceWeights::bytes(const ModelSpec& spec, LayerRange range) {
  uint64_t total = 0;
  for (const Piece& p : layout(spec, range, nullptr, nullptr)) total += p.bytes();
  return total;
}

DeviceWeights::DeviceWeights(const ModelSpec& spec, const StageWeights& stage, HalfType half) : type(half) {
  const LayerRange range = stage.range;
  if (spec.num_experts > 0)
    throw InputError("the CUDA backend runs dense models; " + spec.architecture +
                     " has experts (set engine.backend = \"cpu\")");
  // Check everything before the first byte moves: a bad file fails fast and whole.
  for (const Tensor* t : all_tensors(stage))
    if (!cpu::matmul_supports(t->dtype))
      throw InputError("tensor " + t->name + " has dtype " + std::string(dtype_name(t->dtype)) +
                       ", which the CUDA backend cannot convert to 16 bits");
  std::vector<Piece> pieces = layout(spec, range, &stage, this);
  const size_t total = pieces.empty() ? 0 : pieces.back().offset + pieces.back().bytes();
  CUDA_CHECK(cudaMalloc(&arena_, std::max<size_t>(total, kAlign)));
  ThreadPool pool(0);
  char* base = static_cast<char*>(arena_);
  for (const Piece& p : pieces) {
    char* dst = base + p.offset;
    *p.dst = dst;
    for (const Tensor* t : p.sources) {
      SPARK_CHECK(t != nullptr, "a device piece lacks a bound tensor");
      upload(*t, p.f32, type, dst, pool);
      dst += size_t(t->numel()) * (p.f32 ? 4 : 2);
    }
  }
  if (range.last_layer == spec.num_layers && !lm_head) lm_head = embedding;  // tied, and this stage holds both
}

DeviceWeights::~DeviceWeights() {
  if (arena_) cudaFree(arena_);
}

}  // namespace spark::cuda
