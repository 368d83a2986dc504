// temp_dir.h — a folder of files a unit test writes and that goes away with the test.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace spark::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "sparkd-test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(std::rand()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `text` to path/name, making the folders it needs.
  void write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

}  // namespace spark::testing
