// safetensors.h — strict reader of .safetensors files and sharded model folders.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/tensor.h"
#include "engine/util/mmap.h"

namespace spark {

// One parsed file. The header is validated completely before any tensor is exposed:
// header length within the file and at most 100 MB, a JSON object of objects with no
// duplicate names, known dtypes, non-negative integer shapes whose product does not
// overflow, begin <= end, end - begin == elements x dtype size, and the tensors tiling
// the data section exactly (no gaps, no overlaps, no trailing bytes). Violations throw
// InputError naming the file and the tensor.
class SafetensorsFile {
 public:
  static SafetensorsFile parse(const uint8_t* data, size_t size, const std::string& source);
  static SafetensorsFile open(const std::string& path);

  std::string source;
  std::vector<Tensor> tensors;  // views into the file, sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__", when present
  const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

 private:
  std::shared_ptr<const MappedFile> mapping_;
};

// Every tensor of a Hugging Face model folder: model.safetensors, or the shards named
// by model.safetensors.index.json (shard names are plain file names inside the folder;
// every tensor of the map must be in its shard, every tensor of a shard in the map, and
// no name may appear twice).
struct SafetensorsModel {
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  std::map<std::string, Tensor> tensors;
};
SafetensorsModel open_safetensors_model(const std::string& dir);

// Parses a safetensors dtype string ("BF16"); throws InputError for unknown or
// unsupported dtypes.
DType safetensors_dtype(const std::string& s, const std::string& context);

}  // namespace spark
