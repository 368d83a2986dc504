// mmap.h — a read-only memory mapping of a whole file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace spark {

// Maps a file read-only. The CPU backend serves weights straight from the page cache this
// way, so a restart does not re-read them from disk; a GPU load copies them out and drops
// the pages behind it (release_mapped_pages). An empty file maps to size 0 and data nullptr
// (mmap refuses length 0). Throws InputError when the file cannot be opened (missing,
// a directory, no permission) and RuntimeError when the kernel refuses the mapping.
void release_mapped_pages(const void* p, size_t len);  // below

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
  int fd_ = -1;  // kept for posix_fadvise (release_mapped_pages)
  friend void release_mapped_pages(const void* p, size_t len);
};

// Done with [p, p + len) for now: when those bytes lie in a live MappedFile, the pages they
// touch leave this process's mapping (madvise DONTNEED) and then the page cache
// (posix_fadvise DONTNEED; a page another process maps stays). The mapping stays valid:
// the file is read-only and the pages are clean, so a later access reads them back from
// the file. Bytes outside any mapping (buffers a loader made) are left alone. For loads
// that copy weights out (to a GPU): on unified memory (DGX Spark) the page cache and the
// device allocation share one pool, and keeping both would hold the file twice.
void release_mapped_pages(const void* p, size_t len);
// The whole live MappedFile that holds p (empty when none). The page cache evicts whole
// folios (which may span many pages, and tensors): releasing a file's whole mapping
// evicts what releasing it piece by piece leaves at the pieces' edges.
std::span<const uint8_t> mapped_file_of(const void* p);

}  // namespace spark
