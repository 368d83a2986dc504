// test_model_golden.h — helpers shared by the loader tests: the golden directory written
// by tests/gen/gen_loader_golden.py, hex/FNV helpers, and an InputError matcher.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/check.h"

namespace spark::testing {

// SPARKD_LOADER_GOLDEN lets the integration test point the unit tests at a freshly
// regenerated directory; by default the committed one is used.
inline std::string golden_dir() {
  const char* d = std::getenv("SPARKD_LOADER_GOLDEN");
  return d && *d ? d : "tests/golden/loader";
}

inline const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    std::ifstream in(golden_dir() + "/golden.json");
    if (!in) throw std::runtime_error("cannot read " + golden_dir() + "/golden.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}

inline std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

inline std::string fnv64(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The message of the InputError `f` throws, or a marker when it throws nothing or
// something else (so a CHECK on the message fails visibly).
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an InputError: ") + e.what() + ">";
  }
  return "<no error>";
}

}  // namespace spark::testing

#define CHECK_INPUT_ERROR(expr, needle)                                                        \
  do {                                                                                         \
    std::string msg_ = ::spark::testing::input_error_of([&] { (void)(expr); });                \
    CHECK_MESSAGE(msg_.find(needle) != std::string::npos, "message: ", msg_, "  wanted: ", needle); \
  } while (0)
