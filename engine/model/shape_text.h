// shape_text.h — a tensor shape as the loaders' error messages print it ("[2, 3]").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace spark
