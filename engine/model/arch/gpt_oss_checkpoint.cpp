// gpt_oss_checkpoint.cpp — splitting, de-interleaving and repacking gpt-oss's stacked experts.
#include "engine/model/arch/gpt_oss_checkpoint.h"

#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/quant.h"
#include "engine/model/shape_text.h"
#include "engine/util/check.h"

namespace spark {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// One layer's conversion: reads stacked tensors out of `file` (erasing them from `rest`),
// writes per-expert tensors into `out`, their bytes into `buf` when it is given.
class LayerExperts {
 public:
  LayerExperts(const std::map<std::string, Tensor>& file, std::map<std::string, Tensor>& rest,
               std::map<std::string, Tensor>& out, const ModelSpec& spec, int64_t layer, const std::string& source)
      : file_(file), rest_(rest), out_(out), layer_(layer), source_(source), E_(spec.num_experts),
        I_(spec.moe_intermediate_size), H_(spec.hidden_size) {}

  // Converts this layer; with `buf` the converted bytes go there (place() then points
  // the tensors at them, once the buffer has stopped growing).
  void convert(std::vector<uint8_t>* buf) {
    buf_ = buf;
    // MXFP4 experts and f32 gate/up biases: one allocation in the usual case.
    if (buf_) buf_->reserve(static_cast<size_t>(E_ * (3 * I_ * H_ / 32 * 17 + 2 * I_ * 4)));
    rename(GptOssTensor::ROUTER, Part::ROUTER);
    rename(GptOssTensor::ROUTER_BIAS, Part::ROUTER_BIAS);
    if (const Tensor* blocks = take(GptOssTensor::GATE_UP_BLOCKS)) {
      const Tensor* scales = take(GptOssTensor::GATE_UP_SCALES);
      mxfp4(*blocks, scales, GptOssTensor::GATE_UP_SCALES, 2 * I_, H_, {Part::EXPERT_GATE, Part::EXPERT_UP});
    } else if (const Tensor* t = take(GptOssTensor::GATE_UP)) {
      plain(*t, {H_, 2 * I_}, {Part::EXPERT_GATE, Part::EXPERT_UP});
    }
    if (const Tensor* blocks = take(GptOssTensor::DOWN_BLOCKS)) {
      const Tensor* scales = take(GptOssTensor::DOWN_SCALES);
      mxfp4(*blocks, scales, GptOssTensor::DOWN_SCALES, H_, I_, {Part::EXPERT_DOWN});
    } else if (const Tensor* t = take(GptOssTensor::DOWN)) {
      plain(*t, {I_, H_}, {Part::EXPERT_DOWN});
    }
    if (const Tensor* t = take(GptOssTensor::GATE_UP_BIAS)) bias(*t, 2 * I_, {Part::EXPERT_GATE_BIAS, Part::EXPERT_UP_BIAS});
    if (const Tensor* t = take(GptOssTensor::DOWN_BIAS)) bias(*t, H_, {Part::EXPERT_DOWN_BIAS});
  }
  void place() {
    for (const auto& [name, offset] : pending_) out_[name].data = buf_->data() + offset;
  }

 private:
  [[noreturn]] void fail(const Tensor& t, const std::string& what) const {
    throw InputError(source_ + ": tensor " + t.name + " " + what);
  }
  void expect_shape(const Tensor& t, const std::vector<int64_t>& want) const {
    if (t.shape != want)
      fail(t, "has shape " + shape_str(t.shape) + ", the config (" + std::to_string(E_) + " experts, hidden_size " +
                  std::to_string(H_) + ", intermediate_size " + std::to_string(I_) + ") implies " + shape_str(want));
  }
  const Tensor* take(GptOssTensor which) {
    auto it = file_.find(gptoss_tensor_name(which, layer_));
    if (it == file_.end()) return nullptr;
    rest_.erase(it->first);
    return &it->second;
  }
  void rename(GptOssTensor which, Part part) {
    if (const Tensor* t = take(which)) {
      Tensor x = *t;
      x.name = tensor_name(part, layer_);
      out_[x.name] = x;
    }
  }
  // Reserves `n` bytes of the layer buffer; null when only shapes are wanted.
  uint8_t* reserve(size_t n) {
    if (!buf_) return nullptr;
    const size_t at = buf_->size();
    buf_->resize(at + n);
    return buf_->data() + at;
  }
  // Output tensors are placed after all reservations (the buffer may move while it grows).
  void emit(Part part, int64_t expert, DType dtype, std::vector<int64_t> shape, size_t offset, size_t nbytes,
            const void* view = nullptr) {
    Tensor t;
    t.name = tensor_name(part, layer_, expert);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.nbytes = nbytes;
    t.data = view;
    out_[t.name] = t;
    if (buf_ && !view) pending_.push_back({t.name, offset});
  }

  // Stacked [E, rows, cols / 32, 16] codes and [E, rows, cols / 32] scales; rows split
  // round-robin among `parts` (gate, up interleaved), each row repacked into 17-byte blocks.
  void mxfp4(const Tensor& blocks, const Tensor* scales, GptOssTensor scales_which, int64_t rows, int64_t cols,
             std::vector<Part> parts) {
    const int64_t nb = cols / 32;
    if (blocks.dtype != DType::U8) fail(blocks, "must be U8 (packed FP4 codes), not " + std::string(dtype_name(blocks.dtype)));
    expect_shape(blocks, {E_, rows, nb, 16});
    if (!scales) throw InputError(source_ + ": tensor " + gptoss_tensor_name(scales_which, layer_) + " is missing (" + blocks.name + " needs its E8M0 scales)");
    if (scales->dtype != DType::U8) fail(*scales, "must be U8 (E8M0 exponents), not " + std::string(dtype_name(scales->dtype)));
    expect_shape(*scales, {E_, rows, nb});
    const int64_t n_parts = static_cast<int64_t>(parts.size()), out_rows = rows / n_parts;
    const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockMXFP4);
    for (int64_t e = 0; e < E_; ++e)
      for (int64_t p = 0; p < n_parts; ++p) {
        const size_t bytes = row_bytes * static_cast<size_t>(out_rows);
        const size_t offset = buf_ ? buf_->size() : 0;
        uint8_t* dst = reserve(bytes);
        emit(parts[static_cast<size_t>(p)], e, DType::MXFP4, {out_rows, cols}, offset, bytes);
        if (!dst) continue;
        const uint8_t* code = static_cast<const uint8_t*>(blocks.data);
        const uint8_t* scale = static_cast<const uint8_t*>(scales->data);
        for (int64_t r = 0; r < out_rows; ++r) {
          const int64_t src_row = e * rows + r * n_parts + p;
          for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* in = code + (src_row * nb + b) * 16;
            uint8_t* o = dst + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * sizeof(BlockMXFP4);
            o[0] = scale[src_row * nb + b];
            // Hugging Face pairs values (2j, 2j + 1) in byte j; GGUF pairs (j, j + 16).
            uint8_t v[32];
            for (int j = 0; j < 16; ++j) {
              v[2 * j] = in[j] & 0x0f;
              v[2 * j + 1] = in[j] >> 4;
            }
            for (int j = 0; j < 16; ++j) o[1 + j] = static_cast<uint8_t>(v[j] | (v[j + 16] << 4));
          }
        }
      }
  }

  // Unquantized stacked [E, in, out] (x @ W layout): each part's rows of `out` become a
  // [out / parts, in] matrix of the same dtype.
  void plain(const Tensor& t, std::vector<int64_t> in_out, std::vector<Part> parts) {
    if (!is_float(t.dtype)) fail(t, "must be F32, F16 or BF16, not " + std::string(dtype_name(t.dtype)));
    const int64_t in = in_out[0], outs = in_out[1];
    expect_shape(t, {E_, in, outs});
    const size_t el = static_cast<size_t>(dtype_block_bytes(t.dtype));
    const int64_t n_parts = static_cast<int64_t>(parts.size()), out_rows = outs / n_parts;
    for (int64_t e = 0; e < E_; ++e)
      for (int64_t p = 0; p < n_parts; ++p) {
        const size_t bytes = el * static_cast<size_t>(out_rows * in);
        const size_t offset = buf_ ? buf_->size() : 0;
        uint8_t* dst = reserve(bytes);
        emit(parts[static_cast<size_t>(p)], e, t.dtype, {out_rows, in}, offset, bytes);
        if (!dst) continue;
        const uint8_t* src = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(e * in * outs) * el;
        for (int64_t r = 0; r < out_rows; ++r)
          for (int64_t i = 0; i < in; ++i)
            std::memcpy(dst + static_cast<size_t>(r * in + i) * el,
                        src + static_cast<size_t>(i * outs + r * n_parts + p) * el, el);
      }
  }

  // Stacked [E, n] biases; interleaved among `parts` like the rows they belong to.
  void bias(const Tensor& t, int64_t n, std::vector<Part> parts) {
    if (!is_float(t.dtype)) fail(t, "must be F32, F16 or BF16, not " + std::string(dtype_name(t.dtype)));
    expect_shape(t, {E_, n});
    const size_t el = static_cast<size_t>(dtype_block_bytes(t.dtype));
    const int64_t n_parts = static_cast<int64_t>(parts.size()), len = n / n_parts;
    for (int64_t e = 0; e < E_; ++e)
      for (int64_t p = 0; p < n_parts; ++p) {
        const uint8_t* src = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(e * n) * el;
        if (n_parts == 1) {  // a contiguous slice: a view into the file
          emit(parts[0], e, t.dtype, {len}, 0, el * static_cast<size_t>(len), t.data ? src : nullptr);
          continue;
        }
        const size_t offset = buf_ ? buf_->size() : 0;
        uint8_t* dst = reserve(el * static_cast<size_t>(len));
        emit(parts[static_cast<size_t>(p)], e, t.dtype, {len}, offset, el * static_cast<size_t>(len));
        if (!dst) continue;
        for (int64_t i = 0; i < len; ++i)
          std::memcpy(dst + static_cast<size_t>(i) * el, src + static_cast<size_t>(i * n_parts + p) * el, el);
      }
  }

  const std::map<std::string, Tensor>& file_;
  std::map<std::string, Tensor>& rest_;
  std::map<std::string, Tensor>& out_;
  int64_t layer_;
  const std::string& source_;
  int64_t E_, I_, H_;
  std::vector<uint8_t>* buf_ = nullptr;
  std::vector<std::pair<std::string, size_t>> pending_;
};

}  // namespace

std::map<std::string, Tensor> gptoss_tensors(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                             LayerRange range, Weights* keep, const std::string& source) {
  SPARK_CHECK(spec.gptoss_moe, "gptoss_tensors: not a gpt-oss spec");
  std::map<std::string, Tensor> rest = file, out;
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    const bool load = keep && l >= range.first_layer && l < range.last_layer;
    auto buf = load ? std::make_shared<std::vector<uint8_t>>() : nullptr;
    LayerExperts layer(file, rest, out, spec, l, source);
    layer.convert(buf.get());
    if (buf) {
      layer.place();
      keep->keep_alive(buf);
    }
  }
  for (auto& [name, t] : rest) out.emplace(name, t);
  return out;
}

}  // namespace spark
