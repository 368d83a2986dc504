// assets.h — the dashboard files embedded in the binary at build time.
#pragma once
#include <cstddef>
#include <string_view>

namespace spark {

struct Asset {
  std::string_view path;  // relative to assets/, e.g. "index.html"
  std::string_view data;
  std::string_view mime;
};

// nullptr when no embedded file has that path.
const Asset* find_asset(std::string_view path);

}  // namespace spark
