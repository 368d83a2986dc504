// gguf.cpp — strict GGUF v2/v3 parsing: header, metadata, tensor infos, data layout.
#include "engine/model/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "engine/model/dtype_table.h"
#include "engine/util/check.h"

namespace spark {
namespace {

constexpr uint64_t MAX_STRING_BYTES = 16ull << 20;  // no legitimate key or value is larger
constexpr int MAX_ARRAY_DEPTH = 4;
constexpr uint32_t MAX_DIMS = 4;

std::string ggml_type_name(uint32_t t) {
  static const char* names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
                                "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
                                "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
                                "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (t < sizeof(names) / sizeof(names[0])) return names[t];
  return "type " + std::to_string(t);
}

// Bounds-checked little-endian reader over the file bytes. Every read checks the
// bytes left first, so a truncated or lying file fails with the offset, never reads past.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("GGUF file '" + source_ + "': " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  void need(uint64_t n, const char* what) const {
    if (n > left())
      fail(std::string(what) + " needs " + std::to_string(n) + " bytes but only " +
           std::to_string(left()) + " remain");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the file is little-endian, as is every target
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    if (len > MAX_STRING_BYTES)
      fail(std::string(what) + " string length " + std::to_string(len) + " exceeds the 16 MiB limit");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& source_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL: return 1;
    case GgufType::UINT16:
    case GgufType::INT16: return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32: return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;  // the smallest string is its 8-byte length
    case GgufType::ARRAY: return 12;  // element type + count
  }
  return 1;
}

GgufType read_value_type(Reader& r, const char* what) {
  uint32_t t = r.read<uint32_t>(what);
  if (t > static_cast<uint32_t>(GgufType::FLOAT64)) r.fail("unknown metadata value type " + std::to_string(t));
  return static_cast<GgufType>(t);
}

void read_scalar(Reader& r, GgufType t, GgufValue& v) {
  v.type = t;
  v.i = 0;
  v.u = 0;
  bool is_unsigned = false;
  switch (t) {
    case GgufType::UINT8: v.u = r.read<uint8_t>("u8"); is_unsigned = true; break;
    case GgufType::INT8: v.i = r.read<int8_t>("i8"); break;
    case GgufType::UINT16: v.u = r.read<uint16_t>("u16"); is_unsigned = true; break;
    case GgufType::INT16: v.i = r.read<int16_t>("i16"); break;
    case GgufType::UINT32: v.u = r.read<uint32_t>("u32"); is_unsigned = true; break;
    case GgufType::INT32: v.i = r.read<int32_t>("i32"); break;
    case GgufType::UINT64: v.u = r.read<uint64_t>("u64"); is_unsigned = true; break;
    case GgufType::INT64: v.i = r.read<int64_t>("i64"); break;
    case GgufType::FLOAT32: v.f = r.read<float>("f32"); break;
    case GgufType::FLOAT64: v.f = r.read<double>("f64"); break;
    case GgufType::BOOL: {
      uint8_t b = r.read<uint8_t>("bool");
      if (b > 1) r.fail("bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.i = b;
      break;
    }
    case GgufType::STRING: v.s = r.read_string("string value"); break;
    case GgufType::ARRAY: SPARK_CHECK(false, "arrays are read by read_value"); break;
  }
  // Keep both views of an integer; get_int() refuses a u64 that does not fit int64.
  if (is_unsigned) v.i = static_cast<int64_t>(v.u);
  else v.u = static_cast<uint64_t>(v.i);
}

void read_value(Reader& r, GgufType t, GgufValue& v, int depth) {
  if (t != GgufType::ARRAY) return read_scalar(r, t, v);
  if (depth >= MAX_ARRAY_DEPTH) r.fail("arrays nested deeper than " + std::to_string(MAX_ARRAY_DEPTH));
  v.type = GgufType::ARRAY;
  v.elem_type = read_value_type(r, "array element type");
  uint64_t n = r.read<uint64_t>("array count");
  // Each element takes at least scalar_size bytes of the file: a count the file cannot
  // hold is refused before anything is allocated.
  if (n > r.left() / scalar_size(v.elem_type))
    r.fail("array count " + std::to_string(n) + " of " + gguf_type_name(v.elem_type) +
           " does not fit in the " + std::to_string(r.left()) + " bytes left");
  v.array_size = n;
  size_t count = static_cast<size_t>(n);
  GgufValue e;
  switch (v.elem_type) {
    case GgufType::STRING:
      v.strings.reserve(count);
      for (size_t k = 0; k < count; ++k) v.strings.push_back(r.read_string("array string"));
      break;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      v.floats.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        read_scalar(r, v.elem_type, e);
        v.floats.push_back(e.f);
      }
      break;
    case GgufType::ARRAY:
      v.items.reserve(std::min<size_t>(count, 1024));
      for (size_t k = 0; k < count; ++k) {
        GgufValue item;
        read_value(r, GgufType::ARRAY, item, depth + 1);
        v.items.push_back(std::move(item));
      }
      break;
    case GgufType::UINT64:
      v.uints.reserve(count);
      for (size_t k = 0; k < count; ++k) v.uints.push_back(r.read<uint64_t>("u64"));
      break;
    default:
      v.ints.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        read_scalar(r, v.elem_type, e);
        v.ints.push_back(e.i);
      }
      break;
  }
}

}  // namespace

std::string gguf_type_name(GgufType t) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "type " + std::to_string(i);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default: return false;
  }
}

DType ggml_type_to_dtype(uint32_t t, const std::string& context) {
  if (const DTypeInfo* info = dtype_of_ggml_type(t)) return info->type;
  std::string what = t <= 39 ? "tensor type " + ggml_type_name(t) + " is not supported"
                             : "unknown tensor type " + std::to_string(t);
  throw InputError(context + ": " + what + "; supported: " + gguf_dtype_list());
}

GgufFile GgufFile::parse(const uint8_t* data, size_t size, const std::string& source) {
  GgufFile f;
  f.source = source;
  f.base_ = data;
  Reader r(data, size, f.source);
  uint32_t magic = r.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) r.fail("not a GGUF file (bad magic)");
  f.version = r.read<uint32_t>("version");
  if (f.version == 1) r.fail("GGUF version 1 is not supported (convert the file to v3)");
  if (f.version != 2 && f.version != 3) {
    if ((f.version & 0xFFFF) == 0) r.fail("big-endian GGUF files are not supported");
    r.fail("unsupported GGUF version " + std::to_string(f.version) + " (2 and 3 are supported)");
  }
  uint64_t n_tensors = r.read<uint64_t>("tensor count");
  uint64_t n_kv = r.read<uint64_t>("metadata count");
  // A key/value takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  if (n_kv > r.left() / 13) r.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  if (n_tensors > r.left() / 24) r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.read_string("metadata key");
    GgufType t = read_value_type(r, "metadata value type");
    GgufValue v;
    read_value(r, t, v, 0);
    if (!f.metadata.emplace(key, std::move(v)).second) r.fail("duplicate metadata key '" + key + "'");
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 30))
      r.fail("general.alignment must be a positive power of two");
    f.alignment = a->u;
  }

  std::set<std::string> names;
  f.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = r.read_string("tensor name");
    uint32_t n_dims = r.read<uint32_t>("tensor n_dims");
    if (n_dims > MAX_DIMS)
      r.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (at most 4)");
    uint64_t elems = 1;
    std::vector<int64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t v = r.read<uint64_t>("tensor dimension");
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / v))
        r.fail("tensor '" + t.name + "' element count overflows");
      elems *= v;
      ne[d] = static_cast<int64_t>(v);
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    t.ggml_type = r.read<uint32_t>("tensor type");
    t.dtype = ggml_type_to_dtype(t.ggml_type, "GGUF file '" + source + "', tensor '" + t.name + "'");
    t.offset = r.read<uint64_t>("tensor offset");
    if (!names.insert(t.name).second) r.fail("duplicate tensor name '" + t.name + "'");
    int64_t row = n_dims ? ne[0] : 1;
    try {
      t.nbytes = dtype_nbytes(t.dtype, static_cast<int64_t>(elems), row);
    } catch (const InputError& e) {
      r.fail("tensor '" + t.name + "': " + e.what());
    }
    if (t.offset % f.alignment != 0)
      r.fail("tensor '" + t.name + "' data offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(f.alignment));
    f.tensors.push_back(std::move(t));
  }

  uint64_t start = r.pos();
  start = (start + f.alignment - 1) / f.alignment * f.alignment;
  if (start > size && !f.tensors.empty()) r.fail("data section starts past the end of the file");
  f.data_start = start;
  uint64_t data_len = size > start ? size - start : 0;

  // Tensors must lie inside the data section and must not overlap.
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  uint64_t prev_end = 0;
  const GgufTensorInfo* prev = nullptr;
  for (const GgufTensorInfo* t : order) {
    if (t->offset > data_len || t->nbytes > data_len - t->offset)
      throw InputError("GGUF file '" + source + "': tensor '" + t->name + "' (offset " +
                       std::to_string(t->offset) + ", " + std::to_string(t->nbytes) +
                       " bytes) extends past the end of the file (data section holds " +
                       std::to_string(data_len) + " bytes)");
    if (prev && t->offset < prev_end && t->nbytes > 0)
      throw InputError("GGUF file '" + source + "': tensors '" + prev->name + "' and '" + t->name +
                       "' overlap");
    if (t->nbytes > 0) {
      prev_end = t->offset + t->nbytes;
      prev = t;
    }
  }
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  auto m = MappedFile::open(path);
  GgufFile f = parse(m->data(), m->size(), path);
  f.mapping_ = std::move(m);
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const char* want) {
  throw InputError("GGUF file '" + f.source + "': metadata '" + key + "' is " +
                   gguf_type_name(v.type) + ", expected " + want);
}
}  // namespace

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) wrong_type(*this, key, *v, "a string");
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(*this, key, *v, "an integer");
  if (v->type == GgufType::UINT64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw InputError("GGUF file '" + source + "': metadata '" + key + "' is out of range");
  return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  wrong_type(*this, key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) wrong_type(*this, key, *v, "a bool");
  return v->i != 0;
}

}  // namespace spark
