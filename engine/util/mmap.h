// mmap.h — a read-only memory mapping of a whole file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace spark {

// Maps a file read-only. Weights are served straight from the page cache this way, so a
// restart does not re-read them from disk. An empty file maps to size 0 and data nullptr
// (mmap refuses length 0). Throws InputError when the file cannot be opened (missing,
// a directory, no permission) and RuntimeError when the kernel refuses the mapping.
class MappedFile {
 public:
  enum class Access { SEQUENTIAL, RANDOM };

  static std::shared_ptr<const MappedFile> open(const std::string& path,
                                                Access access = Access::SEQUENTIAL);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Asks the kernel to start reading [offset, offset + len) ahead of use.
  void prefetch(size_t offset, size_t len) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace spark
