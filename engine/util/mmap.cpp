// mmap.cpp — read-only file mappings (MAP_PRIVATE, PROT_READ) with access hints.
#include "engine/util/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/util/check.h"

namespace spark {

namespace {

// Live mappings by start address, so that release_mapped_pages finds a pointer's file.
std::mutex g_mappings_mutex;
std::map<uintptr_t, const MappedFile*> g_mappings;

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, Access access) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw InputError("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError("'" + path + "' is not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    // PROT_READ + MAP_PRIVATE: the pages are shared with the page cache (no copy) and
    // nothing this process does can write back to the model file.
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw RuntimeError("cannot map '" + path + "' (" + std::to_string(m->size_) +
                         " bytes): " + std::strerror(err));
    }
    m->data_ = static_cast<const uint8_t*>(p);
    ::madvise(p, m->size_, access == Access::SEQUENTIAL ? MADV_SEQUENTIAL : MADV_RANDOM);
    m->fd_ = fd;
    const std::lock_guard<std::mutex> lock(g_mappings_mutex);
    g_mappings[reinterpret_cast<uintptr_t>(p)] = m.get();
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    const std::lock_guard<std::mutex> lock(g_mappings_mutex);
    g_mappings.erase(reinterpret_cast<uintptr_t>(data_));
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
  ::close(fd_);
}

void MappedFile::prefetch(size_t offset, size_t len) const {
  if (!data_ || offset >= size_) return;
  if (len > size_ - offset) len = size_ - offset;
  // madvise wants a page-aligned start.
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t start = offset / page * page;
  ::madvise(const_cast<uint8_t*>(data_) + start, len + (offset - start), MADV_WILLNEED);
}

namespace {

// The live mapping holding address `at`, or null; the caller holds g_mappings_mutex.
const MappedFile* find_mapping(uintptr_t at) {
  auto it = g_mappings.upper_bound(at);
  if (it == g_mappings.begin()) return nullptr;
  const MappedFile* m = (--it)->second;
  return at < reinterpret_cast<uintptr_t>(m->data()) + m->size() ? m : nullptr;
}

}  // namespace

std::span<const uint8_t> mapped_file_of(const void* p) {
  const std::lock_guard<std::mutex> lock(g_mappings_mutex);
  const MappedFile* m = find_mapping(reinterpret_cast<uintptr_t>(p));
  return m ? std::span<const uint8_t>(m->data(), m->size()) : std::span<const uint8_t>();
}

void release_mapped_pages(const void* p, size_t len) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(g_mappings_mutex);
  const MappedFile* found = find_mapping(at);
  if (!found) return;
  const MappedFile& m = *found;
  const uintptr_t start = reinterpret_cast<uintptr_t>(m.data());
  len = std::min(len, start + m.size() - at);
  // Every page the range touches, those it shares with neighbours included: a page left
  // mapped would pin its whole folio (large folios span many pages) in the page cache, and
  // a neighbour still to be read just reads its page back.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = at / page * page, end = at + len;
  if (len == 0) return;
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  ::posix_fadvise(m.fd_, off_t(first - start), off_t(end - first), POSIX_FADV_DONTNEED);
}

}  // namespace spark
