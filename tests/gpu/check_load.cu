// check_load.cu — the memory a model load holds at its peak on unified memory. On a DGX
// Spark the page cache and device allocations share one pool, so a load holds
//   device bytes allocated + the model file's pages in the page cache.
// Loading SmolLM2 (a GGUF of ~94 MiB, its matrices packed on the device at about the file's
// size) from a cold cache, a sampler thread reads both every millisecond: device bytes from
// cudaMemGetInfo (the emulator counts its allocations; on a discrete GPU the sum is what
// a Spark would hold), the file's resident pages with mincore over a mapping of its own.
// A load that keeps the file's pages once copied peaks at about device + file; one that
// drops them behind its bounded chunks (release_mapped_pages) at about device + a chunk.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/model_loader.h"
#include "tests/gpu/gpu_check.h"

using namespace spark;
using namespace spark::gpu_check;

namespace {

const char* kSmolLM2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr double kMiB = 1024.0 * 1024.0;
// What a load may hold beyond its device allocation: the upload's chunks are 32 MiB
// (device_weights.cu and its format files) and a few of them may be resident at once (the
// kernel's readahead runs ahead of the copy). Holding the whole file again exceeds it for
// any file over this size.
constexpr double kSlackMiB = 64;

// The file's pages in the page cache, through a mapping that never touches them.
class ResidentPages {
 public:
  explicit ResidentPages(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    SPARK_CHECK(fd_ >= 0, "cannot open " + path);
    size_ = size_t(std::filesystem::file_size(path));
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    SPARK_CHECK(map_ != MAP_FAILED, "cannot map " + path);
    page_ = size_t(::sysconf(_SC_PAGESIZE));
    vec_.resize((size_ + page_ - 1) / page_);
  }
  ~ResidentPages() {
    ::munmap(map_, size_);
    ::close(fd_);
  }
  size_t bytes() {
    if (::mincore(map_, size_, vec_.data()) != 0) return 0;
    size_t n = 0;
    for (unsigned char v : vec_) n += v & 1;
    return n * page_;
  }
  // Evicts the file from the page cache (no process maps its pages yet), so that the load
  // starts cold and every resident page is one it brought in.
  void drop() { ::posix_fadvise(fd_, 0, off_t(size_), POSIX_FADV_DONTNEED); }
  size_t file_bytes() const { return size_; }

 private:
  int fd_ = -1;
  void* map_ = nullptr;
  size_t size_ = 0, page_ = 0;
  std::vector<unsigned char> vec_;
};

size_t device_allocated() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return total - free_bytes;
}

void load_peak() {
  if (!std::filesystem::exists(kSmolLM2)) {
    skip_row("load", "smollm2 load peak", std::string(kSmolLM2) + " missing: run make model");
    return;
  }
  ResidentPages file(kSmolLM2);
  file.drop();
  const size_t before = device_allocated();
  const size_t cold = file.bytes();
  std::atomic<bool> done{false};
  size_t peak = 0, peak_device = 0, peak_file = 0;
  std::thread sampler([&] {
    while (!done.load()) {
      const size_t d = device_allocated() - before, f = file.bytes();
      if (d + f > peak) peak = d + f, peak_device = d, peak_file = f;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  size_t device = 0, left = 0, read = 0;
  {
    const LoadedModel m = load_model(config_for_model(kSmolLM2));
    read = file.bytes();
    CudaOptions o;
    o.max_num_seqs = 1;
    o.max_num_batched_tokens = 64;
    o.max_model_len = 256;
    CudaBackend gpu(m.info.spec, bind_stage(m.info.spec, m.weights), o);
    device = device_allocated() - before;
    left = file.bytes();
  }
  done = true;
  sampler.join();
  info("load", "smollm2 file, resident before the load", fmt("%.1f MiB", double(file.file_bytes()) / kMiB),
       fmt("%.1f MiB resident (dropped)", double(cold) / kMiB));
  info("load", "smollm2 file resident once read and checked", fmt("%.1f MiB", double(read) / kMiB),
       "before the device allocation");
  info("load", "smollm2 device bytes after the load", fmt("%.1f MiB", double(device) / kMiB),
       fmt("file resident after: %.1f MiB", double(left) / kMiB));
  row("load", "smollm2 load peak: device + file pages",
      fmt("%.1f MiB", double(peak) / kMiB) + fmt(" (%.1f", double(peak_device) / kMiB) +
          fmt(" + %.1f)", double(peak_file) / kMiB),
      fmt("<= device + %.0f MiB", kSlackMiB) + fmt(" (twice: %.0f)", double(device + file.file_bytes()) / kMiB),
      double(peak) <= double(device) + kSlackMiB * kMiB);
}

}  // namespace

int main() {
  return run_main("load", [] { load_peak(); });
}
