// device_weights.cu — checks a stage's tensors against the spec, repacks Q8_0 matrices or
// converts them to the compute type on the host (dequantizing other GGUF blocks) and
// uploads them into one device allocation.
#include "engine/backend/cuda/device_weights.h"

#include <algorithm>
#include <string>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/q8_0.h"
#include "engine/model/quant.h"
#include "engine/util/thread_pool.h"

namespace spark::cuda {

namespace {

constexpr size_t kAlign = 256;  // every piece starts on a 256-byte boundary (vector loads, cuBLASLt)
constexpr int64_t kQ8Block = 32;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

enum class Layout : uint8_t { F32_VECTOR, HALF_MATRIX, Q8_0_MATRIX };

// One device array made of source tensors stacked along rows (q, k and v into qkv).
struct Piece {
  std::vector<const Tensor*> sources;  // empty when only the sizes matter (the memory plan)
  std::vector<int64_t> rows;           // rows of each source; for a vector, each source's length
  int64_t cols = 0;                    // 1 for a vector
  Layout layout = Layout::HALF_MATRIX;
  const void** dst = nullptr;       // vectors
  DeviceMatrix* matrix = nullptr;  // matrices
  size_t offset = 0;
  // The share of the piece a batch-1 decode step reads: top_k / num_experts of an MoE
  // layer's experts, none of an embedding that is not also the LM head, else all.
  double read_per_token = 1.0;

  int64_t total_rows() const {
    int64_t n = 0;
    for (int64_t r : rows) n += r;
    return n;
  }
  size_t elements() const { return size_t(total_rows()) * size_t(cols); }
  // Q8_0: the quants, then the scales from here.
  size_t scales_offset() const { return align_up(elements()); }
  size_t bytes() const {
    switch (layout) {
      case Layout::F32_VECTOR: return align_up(elements() * 4);
      case Layout::HALF_MATRIX: return align_up(elements() * 2);
      case Layout::Q8_0_MATRIX: return scales_offset() + align_up(elements() / kQ8Block * 2);
    }
    return 0;
  }
};

template <typename T>
const void** slot(const T*& p) {
  return reinterpret_cast<const void**>(&p);
}

// The pieces of `range` in upload order, formats chosen from `stored`. With `stage` and
// `w`, the pieces carry their source tensors and `w` receives the device pointers; with
// both null only the sizes matter (the memory plan).
std::vector<Piece> layout(const ModelSpec& s, LayerRange range, const StoredDType& stored, const StageWeights* stage,
                          DeviceWeights* w) {
  static const void* sink = nullptr;
  static DeviceMatrix matrix_sink;
  const int64_t H = s.hidden_size, hd = s.head_dim, nh = s.num_heads, nkv = s.num_kv_heads, I = s.intermediate_size;
  std::vector<Piece> out;
  // A matrix stays packed when every part it fuses is Q8_0 and its rows are whole blocks.
  auto matrix = [&](std::vector<const Tensor*> from, std::vector<Part> parts, int64_t layer, std::vector<int64_t> rows,
                    int64_t cols, DeviceMatrix* d) {
    bool q8 = cols % kQ8Block == 0;
    for (Part p : parts) q8 = q8 && stored(p, layer) == DType::Q8_0;
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(rows), cols,
                        q8 ? Layout::Q8_0_MATRIX : Layout::HALF_MATRIX, nullptr, d});
  };
  auto vec = [&](std::vector<const Tensor*> from, std::vector<int64_t> lengths, const void** d) {
    out.push_back(Piece{stage ? std::move(from) : std::vector<const Tensor*>{}, std::move(lengths), 1,
                        Layout::F32_VECTOR, d, nullptr});
  };
  if (range.first_layer == 0) {
    matrix({stage ? stage->embedding : nullptr}, {Part::EMBEDDING}, -1, {s.vocab_size}, H,
           w ? &w->embedding : &matrix_sink);
    if (!s.tie_word_embeddings || range.last_layer != s.num_layers) out.back().read_per_token = 0;  // one row a token
  }
  if (w) w->layers.assign(size_t(range.last_layer - range.first_layer), DeviceLayer{});
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    const size_t index = size_t(l - range.first_layer);
    DeviceLayer* L = w ? &w->layers[index] : nullptr;
    auto m = [&](DeviceMatrix DeviceLayer::*member) { return L ? &(L->*member) : &matrix_sink; };
    auto v = [&](const float* DeviceLayer::*member) { return L ? slot(L->*member) : &sink; };
    auto t = [&](Part part) { return stage ? stage->layers[index].find(part) : nullptr; };
    matrix({t(Part::Q), t(Part::K), t(Part::V)}, {Part::Q, Part::K, Part::V}, l, {nh * hd, nkv * hd, nkv * hd}, H,
           m(&DeviceLayer::qkv));
    if (s.attention_bias)
      vec({t(Part::Q_BIAS), t(Part::K_BIAS), t(Part::V_BIAS)}, {nh * hd, nkv * hd, nkv * hd},
          v(&DeviceLayer::qkv_bias));
    if (s.qk_norm) {
      vec({t(Part::Q_NORM)}, {hd}, v(&DeviceLayer::q_norm));
      vec({t(Part::K_NORM)}, {hd}, v(&DeviceLayer::k_norm));
    }
    vec({t(Part::ATTN_NORM)}, {H}, v(&DeviceLayer::attn_norm));
    vec({t(Part::FFN_NORM)}, {H}, v(&DeviceLayer::ffn_norm));
    matrix({t(Part::O)}, {Part::O}, l, {H}, nh * hd, m(&DeviceLayer::o));
    if (!s.layer_is_moe(l)) {
      matrix({t(Part::GATE), t(Part::UP)}, {Part::GATE, Part::UP}, l, {I, I}, H, m(&DeviceLayer::gate_up));
      matrix({t(Part::DOWN)}, {Part::DOWN}, l, {H}, I, m(&DeviceLayer::down));
      continue;
    }
    const int64_t E = s.num_experts, mi = s.moe_intermediate_size;
    vec({t(Part::ROUTER)}, {E * H}, v(&DeviceLayer::router));
    // Every expert's gate and up rows, then every expert's down rows: one matrix each.
    std::vector<const Tensor*> gate_up, down;
    for (int64_t e = 0; e < E && stage; ++e) {
      const LayerWeights& lw = stage->layers[index];
      gate_up.insert(gate_up.end(), {lw.expert_gate[size_t(e)], lw.expert_up[size_t(e)]});
      down.push_back(lw.expert_down[size_t(e)]);
    }
    matrix(gate_up, {Part::EXPERT_GATE, Part::EXPERT_UP}, l, std::vector<int64_t>(size_t(2 * E), mi), H,
           m(&DeviceLayer::expert_gate_up));
    out.back().read_per_token = double(s.num_experts_per_tok) / double(E);
    matrix(down, {Part::EXPERT_DOWN}, l, std::vector<int64_t>(size_t(E), H), mi, m(&DeviceLayer::expert_down));
    out.back().read_per_token = double(s.num_experts_per_tok) / double(E);
  }
  if (range.last_layer == s.num_layers) {
    vec({stage ? stage->final_norm : nullptr}, {H}, w ? slot(w->final_norm) : &sink);
    // Tied models reuse the embedding; a stage without layer 0 loads it as its head.
    if (!s.tie_word_embeddings || range.first_layer != 0)
      matrix({stage ? stage->lm_head : nullptr}, {s.tie_word_embeddings ? Part::EMBEDDING : Part::LM_HEAD}, -1,
             {s.vocab_size}, H, w ? &w->lm_head : &matrix_sink);
  }
  size_t offset = 0;
  for (Piece& piece : out) {
    piece.offset = offset;
    offset += piece.bytes();
  }
  return out;
}

// Scratch for the largest packed matrix's 16-bit rows (rounded up to Gemm::linear's row
// blocks of 16), capped: Gemm::linear works in row blocks.
size_t scratch_bytes_for(const std::vector<Piece>& pieces) {
  size_t most = 0;
  for (const Piece& p : pieces)
    if (p.layout == Layout::Q8_0_MATRIX)
      most = std::max(most, align_up(size_t((p.total_rows() + 15) / 16 * 16) * size_t(p.cols) * 2));
  return std::min(most, DeviceWeights::kDequantScratchBytes);
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
        dequantize_tensor_row(t, r0 + r, row);
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

StoredDType stored_in(const StageWeights& stage) {
  // A tied head asks as EMBEDDING; a stage without layer 0 holds it as lm_head only.
  return [&stage](Part part, int64_t layer) {
    const LayerWeights* lw = layer >= 0 ? &stage.layers[size_t(layer - stage.range.first_layer)] : nullptr;
    const std::vector<const Tensor*>* experts = !lw                           ? nullptr
                                                : part == Part::EXPERT_GATE ? &lw->expert_gate
                                                : part == Part::EXPERT_UP   ? &lw->expert_up
                                                : part == Part::EXPERT_DOWN ? &lw->expert_down
                                                                            : nullptr;
    if (experts) {  // the stack is packed only when every expert is Q8_0: any other dtype speaks for all
      for (const Tensor* e : *experts)
        if (e->dtype != DType::Q8_0) return e->dtype;
      return experts->empty() ? DType::F32 : DType::Q8_0;
    }
    const Tensor* t = lw                                        ? lw->find(part)
                      : part == Part::EMBEDDING && stage.embedding ? stage.embedding
                                                                   : stage.lm_head;
    SPARK_CHECK(t != nullptr, "a device matrix lacks a bound tensor");
    return t->dtype;
  };
}

}  // namespace

uint64_t DeviceWeights::bytes(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  const std::vector<Piece> pieces = layout(spec, range, stored, nullptr, nullptr);
  uint64_t total = scratch_bytes_for(pieces);
  for (const Piece& p : pieces) total += p.bytes();
  return total;
}

uint64_t DeviceWeights::bytes_per_token(const ModelSpec& spec, LayerRange range, const StoredDType& stored) {
  double total = 0;
  for (const Piece& p : layout(spec, range, stored, nullptr, nullptr)) total += double(p.bytes()) * p.read_per_token;
  return uint64_t(total);
}

DeviceWeights::DeviceWeights(const ModelSpec& spec, const StageWeights& stage, HalfType half) : type(half) {
  const LayerRange range = stage.range;
  // Check everything before the first byte moves: a bad file fails fast and whole.
  for (const Tensor* t : all_tensors(stage))
    if (!dequant_supported(t->dtype))
      throw InputError("tensor " + t->name + " has dtype " + std::string(dtype_name(t->dtype)) +
                       ", which the CUDA backend cannot read");
  std::vector<Piece> pieces = layout(spec, range, stored_in(stage), &stage, this);
  const size_t total = pieces.empty() ? 0 : pieces.back().offset + pieces.back().bytes();
  dequant_scratch_bytes = scratch_bytes_for(pieces);
  CUDA_CHECK(cudaMalloc(&arena_, std::max<size_t>(total + dequant_scratch_bytes, kAlign)));
  ThreadPool pool(0);
  char* base = static_cast<char*>(arena_);
  if (dequant_scratch_bytes > 0) dequant_scratch = base + total;
  for (const Piece& p : pieces) {
    char* dst = base + p.offset;
    if (p.dst) *p.dst = dst;
    if (p.matrix) {
      p.matrix->data = dst;
      if (p.layout == Layout::Q8_0_MATRIX) {
        p.matrix->format = WeightFormat::Q8_0;
        p.matrix->scales = dst + p.scales_offset();
      }
    }
    size_t row0 = 0;  // rows of this piece uploaded so far
    for (const Tensor* t : p.sources) {
      SPARK_CHECK(t != nullptr, "a device piece lacks a bound tensor");
      if (p.layout == Layout::Q8_0_MATRIX)
        upload_q8_0(*t, dst + row0 * size_t(p.cols), dst + p.scales_offset() + row0 * size_t(p.cols / kQ8Block) * 2);
      else
        upload(*t, p.layout == Layout::F32_VECTOR, type, dst + row0 * size_t(p.cols) * (p.layout == Layout::F32_VECTOR ? 4 : 2),
               pool);
      row0 += size_t(t->numel() / p.cols);
    }
  }
  // Tied, and this stage holds both.
  if (range.last_layer == spec.num_layers && !lm_head.data) lm_head = embedding;
}

DeviceWeights::~DeviceWeights() {
  if (arena_) cudaFree(arena_);
}

}  // namespace spark::cuda
