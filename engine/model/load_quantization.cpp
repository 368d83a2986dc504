// load_quantization.cpp — which weights [model] quantize changes, and the quantizing itself
// (quantize.h's Q8_0 and FP8 encoders over rows of any float tensor).
#include "engine/model/load_quantization.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/quant.h"
#include "engine/model/quantize.h"
#include "engine/util/check.h"
#include "engine/util/mmap.h"
#include "engine/util/thread_pool.h"

namespace spark {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Rows quantized in one go: about 16 MiB of f32.
constexpr int64_t kBandValues = int64_t(4) << 20;

}  // namespace

WeightQuantization weight_quantization(const ModelConfig& model) {
  WeightQuantization q;
  if (model.quantize == "none") return q;
  q.to = model.quantize == "fp8" ? DType::F8_E4M3 : DType::Q8_0;
  for (const PartFamily& g : part_families()) {
    const bool kept = std::find(model.quantize_keep.begin(), model.quantize_keep.end(), g.name) != model.quantize_keep.end();
    for (Part p : g.parts) q.parts[size_t(p)] = !kept;
  }
  return q;
}

std::string describe_quantization(const WeightQuantization& q) {
  if (!q.active()) return "none";
  std::string out = q.to == DType::Q8_0 ? "q8_0 (" : "fp8 (";
  bool first = true;
  for (const PartFamily& g : part_families()) {
    if (!q.parts[size_t(g.parts.front())]) continue;
    out += (first ? "" : ", ") + std::string(g.name);
    first = false;
  }
  return out + (first ? "no part)" : ")");
}

DType served_dtype(const WeightQuantization& q, const ModelSpec& spec, Part part, DType stored, int64_t cols) {
  if (!q.active() || !is_float(stored)) return stored;
  bool chosen = q.parts[size_t(part)];
  if (part == Part::EMBEDDING) {
    if (q.to == DType::F8_E4M3) return stored;
    chosen = chosen || (spec.tie_word_embeddings && q.parts[size_t(Part::LM_HEAD)]);
  }
  if (!chosen) return stored;
  if (q.to == DType::Q8_0 && cols % dtype_block_elems(DType::Q8_0) != 0) return stored;
  return q.to;
}

StoredDType served_dtypes(StoredDType stored, const WeightQuantization& q, const ModelSpec& spec) {
  if (!q.active()) return stored;
  return [stored = std::move(stored), q, &spec](Part part, int64_t layer) {
    const DType d = stored(part, layer);
    const std::vector<PartSpec> parts = layer >= 0 ? layer_parts(spec, layer) : outer_parts(spec, full_range(spec));
    for (const PartSpec& p : parts)
      if (p.part == part) return served_dtype(q, spec, part, d, p.shape.back());
    // A tied head asks as EMBEDDING; a stage that holds it as its head sees the same shape.
    return served_dtype(q, spec, part, d, spec.hidden_size);
  };
}

int64_t fp8_load_block_rows(const ModelSpec& spec) { return spec.fp8_block_rows > 0 ? spec.fp8_block_rows : 1; }
int64_t fp8_load_block_cols(const ModelSpec& spec, int64_t cols) {
  return spec.fp8_block_rows > 0 ? spec.fp8_block_cols : cols;
}

void quantize_rows(const Tensor& t, const ModelSpec& spec, int64_t row0, int64_t n, DType to, void* dst, float* scales) {
  SPARK_CHECK(is_float(t.dtype) && row0 >= 0 && n > 0 && row0 + n <= t.rows(), "quantize_rows: bad source or rows");
  const int64_t cols = t.cols();
  if (to == DType::Q8_0) {
    const size_t row_bytes = dtype_nbytes(DType::Q8_0, cols, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < n; ++r) {
      dequantize_tensor_row(t, row0 + r, row.data());
      quantize_q8_0(row.data(), static_cast<uint8_t*>(dst) + size_t(r) * row_bytes, cols);
    }
    return;
  }
  SPARK_CHECK(to == DType::F8_E4M3, "quantize_rows: Q8_0 or F8_E4M3");
  const int64_t band = fp8_load_block_rows(spec), block_cols = fp8_load_block_cols(spec, cols);
  SPARK_CHECK(row0 % band == 0, "quantize_rows: FP8 rows start on a band of scale blocks");
  const int64_t grid_cols = (cols + block_cols - 1) / block_cols;
  std::vector<float> x;
  for (int64_t r = 0; r < n; r += band) {
    const int64_t rows = std::min(band, n - r);
    x.resize(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) dequantize_tensor_row(t, row0 + r + i, x.data() + i * cols);
    quantize_fp8_e4m3(x.data(), rows, cols, block_cols, static_cast<uint8_t*>(dst) + size_t(r * cols),
                      scales + (r / band) * grid_cols);
  }
}

void quantize_weights(Weights& w, const ModelSpec& spec, const WeightQuantization& q) {
  if (!q.active()) return;
  ThreadPool pool(0);
  for (const TensorSpec& ts : expected_tensors(spec, w.range())) {
    const Tensor* source = w.find(ts.name);
    SPARK_CHECK(source != nullptr, "quantize_weights: a bound tensor is missing: " + ts.name);
    const int64_t rows = source->rows(), cols = source->cols();
    if (ts.shape.size() != 2 || served_dtype(q, spec, ts.part, source->dtype, cols) == source->dtype) continue;
    Tensor t = *source;
    const int64_t band = q.to == DType::F8_E4M3 ? fp8_load_block_rows(spec) : 1;
    const int64_t grid_rows = (rows + band - 1) / band;
    const int64_t grid_cols = q.to == DType::F8_E4M3 ? (cols + fp8_load_block_cols(spec, cols) - 1) / fp8_load_block_cols(spec, cols) : 0;
    auto data = std::make_shared<std::vector<uint8_t>>(dtype_nbytes(q.to, rows * cols, cols));
    auto scales = std::make_shared<std::vector<float>>(size_t(grid_rows * grid_cols));
    const size_t row_bytes = data->size() / size_t(rows);
    // Bands of whole scale blocks, a few MiB of the source each, quantized in parallel;
    // the source's file pages are dropped once a band is done.
    const int64_t chunk = std::max<int64_t>(1, kBandValues / cols / band) * band;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      pool.parallel_for((n + band - 1) / band, 1, [&](int64_t begin, int64_t end) {
        const int64_t a = r0 + begin * band, b = std::min(r0 + end * band, r0 + n);
        quantize_rows(*source, spec, a, b - a, q.to, data->data() + size_t(a) * row_bytes,
                      scales->data() + (a / band) * grid_cols);
      });
      const size_t src_row_bytes = source->nbytes / size_t(rows);
      release_mapped_pages(static_cast<const uint8_t*>(source->data) + size_t(r0) * src_row_bytes, size_t(n) * src_row_bytes);
    }
    t.dtype = q.to;
    t.data = data->data();
    t.nbytes = data->size();
    if (q.to == DType::F8_E4M3) {
      t.scale = scales->data();
      t.scale_block_rows = band;
      t.scale_block_cols = fp8_load_block_cols(spec, cols);
    }
    w.replace(std::move(t), {std::move(data), std::move(scales)});
  }
}

}  // namespace spark
