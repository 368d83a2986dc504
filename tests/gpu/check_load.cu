// check_load.cu — the memory a model load holds at its peak on unified memory. On a DGX
// Spark the page cache and device allocations share one pool, so a load holds
//   device bytes allocated + the model file's pages in the page cache.
// Loading SmolLM2 (a GGUF of ~94 MiB, its matrices packed on the device at about the file's
// size) from a cold cache, a sampler thread reads both every millisecond: device bytes from
// cudaMemGetInfo (the emulator counts its allocations; on a discrete GPU the sum is what
// a Spark would hold), the file's resident pages with mincore over a mapping of its own.
// A load that keeps the file's pages once copied peaks at about device + file; one that
// drops them behind its bounded chunks (release_mapped_pages) at about device + a chunk.
// And a hostile file: a GGUF whose Q8_0 tensor holds a NaN block scale is refused by the
// whole load sequence (plan, weights, CUDA backend) naming the tensor, with no device
// memory allocated.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/stage_loader.h"
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

// `quantize`: [model] quantize, applied by the upload to the file's 16-bit matrices (a
// chunk of rows at a time: device_weights.cu's upload_quantized).
void load_peak(const std::string& path, const std::string& what, const std::string& quantize = "none") {
  if (!model_file_present("load", what + " load peak", path.c_str())) return;
  ResidentPages file(path);
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
    Config c = config_for_model(path);
    c.model.quantize = quantize;
    const LoadedModel m = load_model(c);
    read = file.bytes();
    CudaOptions o;
    o.quantize = m.info.quantize;
    o.max_num_seqs = 1;
    o.max_num_batched_tokens = 64;
    o.max_model_len = 256;
    CudaBackend gpu(m.info.spec, bind_stage(m.info.spec, m.weights), o);
    device = device_allocated() - before;
    left = file.bytes();
  }
  done = true;
  sampler.join();
  info("load", what + " file, resident before the load", fmt("%.1f MiB", double(file.file_bytes()) / kMiB),
       fmt("%.1f MiB resident (dropped)", double(cold) / kMiB));
  info("load", what + " file resident once read and checked", fmt("%.1f MiB", double(read) / kMiB),
       "before the device allocation");
  info("load", what + " device bytes after the load", fmt("%.1f MiB", double(device) / kMiB),
       fmt("file resident after: %.1f MiB", double(left) / kMiB));
  row("load", what + " load peak: device + file pages",
      fmt("%.1f MiB", double(peak) / kMiB) + fmt(" (%.1f", double(peak_device) / kMiB) +
          fmt(" + %.1f)", double(peak_file) / kMiB),
      fmt("<= device + %.0f MiB", kSlackMiB) + fmt(" (twice: %.0f)", double(device + file.file_bytes()) / kMiB),
      double(peak) <= double(device) + kSlackMiB * kMiB);
}

void nan_block_scale() {
  const std::string source = "tests/golden/models/llama_q8_0.gguf";
  std::ifstream in(source, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  size_t at = 0;
  {
    const GgufFile f = GgufFile::open(source);
    const GgufTensorInfo* t = f.find_tensor("blk.0.ffn_up.weight");
    SPARK_CHECK(t && t->dtype == DType::Q8_0, source + " lacks its Q8_0 blk.0.ffn_up.weight");
    at = size_t(static_cast<const uint8_t*>(f.tensor_data(*t)) - f.mapping()->data()) + 5 * 34;  // block 5's d
  }
  const uint16_t nan = 0x7E00;
  std::memcpy(bytes.data() + at, &nan, 2);
  const std::string path = std::filesystem::temp_directory_path() / ("sparkd_check_nan_scale_" + std::to_string(getpid()) + ".gguf");
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  Config c = config_for_model(path);
  c.engine.backend = "cuda";
  const size_t before = device_allocated();
  std::string error = "(loaded)";
  try {
    load_stage(c);
  } catch (const InputError& e) {
    error = e.what();
  }
  std::filesystem::remove(path);
  const size_t used = device_allocated() - before;
  const bool named = error.find("'model.layers.0.mlp.up_proj.weight' (Q8_0) has a block scale d = nan") != std::string::npos;
  row("load", "Q8_0 GGUF with a NaN block scale, cuda backend", named ? "refused naming the tensor" : error.substr(0, 80),
      "InputError naming it", named);
  row("load", "  device bytes allocated before the refusal", fmt("%.0f", double(used)), "0", used == 0);
}

}  // namespace

int main() {
  return run_main("load", [] {
    load_peak(kSmolLM2, "smollm2");
    // SmolLM2 in F16, quantized to Q8_0 on the way up: the device holds Q8_0, the file's
    // 16-bit pages never all at once. The F16 copy is a benchmark's (tests/bench/
    // dequantize_gguf.py writes it); where it was not made, the row says so.
    const char* f16 = "build/bench/SmolLM2-135M-Instruct.F16.gguf";
    if (std::filesystem::exists(f16))
      load_peak(f16, "smollm2 F16 quantized to q8_0", "q8_0");
    else
      skip_row("load", "smollm2 F16 quantized to q8_0 load peak",
               std::string(f16) + " is not here (tests/bench/dequantize_gguf.py writes it)");
    nan_block_scale();
  });
}
