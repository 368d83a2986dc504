// assets.cpp — lookup in the table the build's assembler file provides (assets/embed.sh).
#include "web/assets.h"

#include <cstdint>
#include <string>
#include <vector>

namespace {
struct RawAsset {
  const char* name;
  const char* data;
  uint64_t size;
};
}  // namespace

extern "C" const RawAsset sparkd_assets[];

namespace spark {
namespace {

std::string_view mime_of(std::string_view path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

const std::vector<Asset>& table() {
  static const std::vector<Asset> assets = [] {
    std::vector<Asset> out;
    for (const RawAsset* a = sparkd_assets; a->name; ++a)
      out.push_back({a->name, std::string_view(a->data, a->size), mime_of(a->name)});
    return out;
  }();
  return assets;
}

}  // namespace

const Asset* find_asset(std::string_view path) {
  for (const Asset& a : table())
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace spark
