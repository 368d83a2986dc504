// gguf.h — the GGUF (v2/v3) file reader: metadata, tensor infos, the tokenizer found in
// the metadata, and the mapping of GGUF tensor names to Hugging Face names.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/model/gguf_vocab.h"
#include "engine/util/mmap.h"

namespace spark {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string gguf_type_name(GgufType t);

// One metadata value. Scalars use one of i/u/f/b/s by type; an ARRAY holds its
// elements in the vector matching elem_type (strings, integers, floats) or, for arrays
// of arrays, in `items`.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // ARRAY only
  int64_t i = 0;                         // signed integers and BOOL (0/1)
  uint64_t u = 0;                        // unsigned integers
  double f = 0;                          // FLOAT32 / FLOAT64
  std::string s;                         // STRING
  std::vector<std::string> strings;      // ARRAY of STRING
  std::vector<int64_t> ints;             // ARRAY of BOOL and of every integer type but UINT64
  std::vector<uint64_t> uints;           // ARRAY of unsigned ints
  std::vector<double> floats;            // ARRAY of FLOAT32 / FLOAT64
  std::vector<GgufValue> items;          // ARRAY of ARRAY
  uint64_t array_size = 0;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }
};

struct GgufTensorInfo {
  std::string name;        // as in the file (llama.cpp's naming, arch.h: gguf_tensor_name)
  uint32_t ggml_type = 0;  // GGML type number
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first (ne[] reversed)
  uint64_t offset = 0;         // from the start of the data section
  size_t nbytes = 0;
};

// A parsed GGUF file. Every structural rule is checked at parse time: magic and
// version, string and array sizes against the bytes left, at most 4 dimensions, no
// element-count overflow, known and supported tensor types, rows a whole number of
// blocks, alignment a power of two, tensor offsets aligned, in the file and not
// overlapping, no duplicate keys or tensor names. Violations throw InputError naming the
// file, the byte offset where relevant, and the problem.
class GgufFile {
 public:
  // Parses bytes owned by the caller (tests, fuzzing); `source` names them in messages.
  static GgufFile parse(const uint8_t* data, size_t size, const std::string& source);
  // Maps and parses a file; the result keeps the mapping alive.
  static GgufFile open(const std::string& path);

  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // byte offset of the data section in the file
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  std::string source;

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Typed lookups; nullopt when absent, InputError when present with the wrong type.
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // accepts integers too
  std::optional<bool> get_bool(const std::string& key) const;

  // The bytes of a tensor (nullptr when parsed from a caller's buffer that is gone).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return base_ + data_start + t.offset; }
  const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

 private:
  const uint8_t* base_ = nullptr;
  std::shared_ptr<const MappedFile> mapping_;
};

// DType of a GGML type number; throws InputError for unknown or unsupported types.
DType ggml_type_to_dtype(uint32_t ggml_type, const std::string& context);

// The tokenizer in a GGUF file's metadata (tokenizer.ggml.*, tokenizer.chat_template).
// Array lengths and special ids are checked against the token count.
GgufVocab read_gguf_vocab(const GgufFile& file);
GgufVocab read_gguf_vocab(const std::string& path);

// The model spec from GGUF metadata (general.architecture llama, qwen2, qwen3 or
// qwen3moe and its {arch}.* keys), named after the matching Hugging Face class. Llama 3
// rope scaling stored as a rope_freqs tensor is recognised and turned back into
// RopeScaling parameters.
ModelSpec spec_from_gguf(const GgufFile& file);

}  // namespace spark
