// runtime.cpp — the emulated CUDA runtime API: device memory is host memory, every stream
// executes its work immediately (in issue order, which is one valid CUDA schedule),
// events record wall time, and stream capture records closures that graphs replay.
// Capture enforces the rules a real capture would (no synchronous calls, no legacy-stream
// work, no new allocations), since breaking them is a bug the GPU would report.
// A server calls the runtime from several threads (the engine's, the peer link's): one
// device lock serializes every call, as if the device ran one thing at a time; the last
// error is per host thread, as in CUDA.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda_runtime.h"
#include "emu/scheduler.h"

struct CUstream_st {
  unsigned flags = 0;
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::vector<std::function<void()>> captured;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};

namespace {

thread_local cudaError_t g_pending = cudaSuccess;  // reported by the next error-returning call
std::recursive_mutex g_device;
using DeviceLock = std::lock_guard<std::recursive_mutex>;
std::set<cudaStream_t> g_streams;
std::map<const void*, int> g_max_dynamic_smem;
std::map<void*, size_t> g_allocs;
size_t g_allocated = 0;
constexpr size_t kTotalMemory = 80ull << 30;
constexpr size_t kOptinSmem = 227u << 10;

cudaError_t fail(cudaError_t e) {
  if (g_pending == cudaSuccess) g_pending = e;
  return e;
}

// The capturing stream of a global- or thread-local-mode capture, if any: while it runs,
// "unsafe" calls (synchronous copies, synchronization, allocation) are errors on a GPU.
cudaStream_t strict_capture() {
  for (cudaStream_t s : g_streams)
    if (s->capturing && s->mode != cudaStreamCaptureModeRelaxed) return s;
  return nullptr;
}

cudaError_t unsafe_during_capture(const char* what) {
  if (cudaStream_t s = strict_capture()) {
    std::fprintf(stderr, "EMU ERROR: %s during stream capture (capture invalidated)\n", what);
    s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

bool known_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || g_streams.count(s);
}

// Runs `op` on `s` now, or appends it to the capture. Work on the legacy stream while a
// blocking stream captures joins the capture implicitly: an error on a GPU.
cudaError_t submit(cudaStream_t s, const char* what, std::function<void()> op) {
  if (!known_stream(s)) {
    std::fprintf(stderr, "EMU ERROR: %s on an unknown or destroyed stream %p\n", what, static_cast<void*>(s));
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (s && s != cudaStreamLegacy && s != cudaStreamPerThread && s->capturing) {
    s->captured.push_back(std::move(op));
    return cudaSuccess;
  }
  if (s == nullptr || s == cudaStreamLegacy) {
    for (cudaStream_t c : g_streams)
      if (c->capturing && !(c->flags & cudaStreamNonBlocking)) {
        std::fprintf(stderr, "EMU ERROR: %s on the legacy default stream while a blocking stream captures\n", what);
        c->invalidated = true;
        return fail(cudaErrorStreamCaptureImplicit);
      }
  }
  op();
  return cudaSuccess;
}

bool is_device_ptr(const void* p) {
  auto it = g_allocs.upper_bound(const_cast<void*>(p));
  if (it == g_allocs.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

// A copy whose kind contradicts where its pointers live is a bug a GPU may or may not catch.
cudaError_t check_kind(const void* dst, const void* src, cudaMemcpyKind kind, const char* what) {
  const bool dd = is_device_ptr(dst), sd = is_device_ptr(src);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !sd; break;
    case cudaMemcpyDeviceToHost: ok = !dd && sd; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    default: break;
  }
  if (!ok) {
    std::fprintf(stderr, "EMU ERROR: %s kind %d with dst %s, src %s\n", what, int(kind), dd ? "device" : "host",
                 sd ? "device" : "host");
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace

namespace emu {

void launch_impl(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 KernelBody body, bool programmatic) {
  const DeviceLock lock(g_device);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    std::fprintf(stderr, "EMU ERROR: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): invalid configuration\n",
                 name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (smem > 48u * 1024) {
    auto it = g_max_dynamic_smem.find(kernel);
    const size_t allowed = it == g_max_dynamic_smem.end() ? 48u * 1024 : size_t(it->second);
    if (smem > allowed || smem > kOptinSmem) {
      std::fprintf(stderr,
                   "EMU ERROR: launch of %s with %zu bytes of dynamic shared memory; "
                   "cudaFuncAttributeMaxDynamicSharedMemorySize allows %zu\n",
                   name, smem, allowed);
      fail(cudaErrorInvalidValue);
      return;
    }
  }
  // Fault injection: some GPUs and drivers are reported to refuse programmatic launches
  // during graph capture; EMU_REFUSE_PROGRAMMATIC_CAPTURE set (read at each launch) does
  // the same, so that the engine's fallback can be exercised.
  const bool refuse = std::getenv("EMU_REFUSE_PROGRAMMATIC_CAPTURE") != nullptr;
  if (refuse && programmatic && stream && known_stream(stream) && stream != cudaStreamLegacy &&
      stream != cudaStreamPerThread && stream->capturing) {
    std::fprintf(stderr, "EMU: refused a programmatic launch of %s during capture (fault injection)\n", name);
    stream->invalidated = true;
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  auto info = std::make_shared<LaunchInfo>(LaunchInfo{name, grid, block, smem, std::move(body), programmatic});
  submit(stream, name, [info]() {
    if (!run_grid(*info)) fail(cudaErrorLaunchFailure);
  });
}

namespace {
thread_local const char* g_launch_name = nullptr;
}  // namespace

void name_next_launch(const char* name) { g_launch_name = name; }

const char* take_launch_name() {
  const char* name = g_launch_name ? g_launch_name : "cudaLaunchKernelEx";
  g_launch_name = nullptr;
  return name;
}

}  // namespace emu

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "sparkd CPU emulation of an H100");
  prop->totalGlobalMem = kTotalMemory;
  prop->sharedMemPerBlock = 48u << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->clockRate = 1980000;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->integrated = 0;
  prop->concurrentKernels = 1;
  prop->memoryClockRate = 2619000;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 228u << 10;
  prop->sharedMemPerBlockOptin = kOptinSmem;
  prop->regsPerMultiprocessor = 65536;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrClockRate: *value = p.clockRate; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMemoryClockRate: *value = p.memoryClockRate; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  const DeviceLock lock(g_device);
  if (cudaError_t e = unsafe_during_capture("cudaDeviceSynchronize")) return e;
  return cudaGetLastError();
}
cudaError_t cudaDeviceReset() { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const DeviceLock lock(g_device);
  *total_bytes = kTotalMemory;
  *free_bytes = kTotalMemory - g_allocated;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_pending;
  g_pending = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_pending; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorLaunchFailure: return "emulated kernel reported a device error (see EMU ERROR lines)";
    default: return cudaGetErrorName(err);
  }
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  const DeviceLock lock(g_device);
  *p = nullptr;
  if (cudaError_t e = unsafe_during_capture("cudaMalloc")) return e;
  // Exactly `bytes` (not rounded up like the GPU's allocator): under ASan the first byte
  // past the end is a redzone, so a kernel's overrun is caught even inside the rounding.
  void* m = nullptr;
  if (posix_memalign(&m, 256, std::max<size_t>(bytes, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  // Fresh device memory holds garbage, never zeros.
  std::memset(m, 0xA5, std::min<size_t>(bytes, 256u << 20));
  g_allocs[m] = bytes;
  g_allocated += bytes;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  const DeviceLock lock(g_device);
  if (!p) return cudaSuccess;
  if (cudaError_t e = unsafe_during_capture("cudaFree")) return e;
  auto it = g_allocs.find(p);
  if (it == g_allocs.end()) {
    std::fprintf(stderr, "EMU ERROR: cudaFree of %p, which cudaMalloc did not return\n", p);
    return fail(cudaErrorInvalidValue);
  }
  g_allocated -= it->second;
  g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const DeviceLock lock(g_device);
  if (cudaError_t e = unsafe_during_capture("cudaMemcpy")) return e;
  if (cudaError_t e = check_kind(dst, src, kind, "cudaMemcpy")) return e;
  return submit(nullptr, "cudaMemcpy", [=]() { std::memcpy(dst, src, bytes); });
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  const DeviceLock lock(g_device);
  if (cudaError_t e = check_kind(dst, src, kind, "cudaMemcpyAsync")) return e;
  return submit(s, "cudaMemcpyAsync", [=]() { std::memcpy(dst, src, bytes); });
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  const DeviceLock lock(g_device);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = check_kind(dst, src, kind, "cudaMemcpy2DAsync")) return e;
  return submit(s, "cudaMemcpy2DAsync", [=]() {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const DeviceLock lock(g_device);
  if (cudaError_t e = unsafe_during_capture("cudaMemset")) return e;
  return submit(nullptr, "cudaMemset", [=]() { std::memset(p, value, bytes); });
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  const DeviceLock lock(g_device);
  return submit(s, "cudaMemsetAsync", [=]() { std::memset(p, value, bytes); });
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  const DeviceLock lock(g_device);
  *s = new CUstream_st;
  (*s)->flags = flags;
  g_streams.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  const DeviceLock lock(g_device);
  if (!g_streams.erase(s)) return fail(cudaErrorInvalidResourceHandle);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  const DeviceLock lock(g_device);
  if (!known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (s && s != cudaStreamLegacy && s != cudaStreamPerThread && s->capturing) {
    std::fprintf(stderr, "EMU ERROR: cudaStreamSynchronize of a capturing stream\n");
    s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (cudaError_t e = unsafe_during_capture("cudaStreamSynchronize")) return e;
  return cudaGetLastError();
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  const DeviceLock lock(g_device);
  return known_stream(s) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  const DeviceLock lock(g_device);
  if (s == nullptr || s == cudaStreamLegacy || !g_streams.count(s)) {
    std::fprintf(stderr, "EMU ERROR: cudaStreamBeginCapture on the legacy stream or an unknown stream\n");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (s->capturing) return fail(cudaErrorIllegalState);
  s->capturing = true;
  s->invalidated = false;
  s->mode = mode;
  s->captured.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  const DeviceLock lock(g_device);
  *graph = nullptr;
  if (!g_streams.count(s) || !s->capturing) return fail(cudaErrorIllegalState);
  s->capturing = false;
  if (s->invalidated) {
    s->captured.clear();
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(s->captured)};
  s->captured.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  const DeviceLock lock(g_device);
  if (!known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  *status = cudaStreamCaptureStatusNone;
  if (s && s != cudaStreamLegacy && s != cudaStreamPerThread && s->capturing)
    *status = s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  const DeviceLock lock(g_device);
  return submit(s, "cudaEventRecord", [e]() {
    e->t = std::chrono::steady_clock::now();
    e->recorded = true;
  });
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  const DeviceLock lock(g_device);
  if (cudaError_t e = unsafe_during_capture("cudaEventSynchronize")) return e;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  const DeviceLock lock(g_device);
  if (!exec) return fail(cudaErrorInvalidValue);
  return submit(s, "cudaGraphLaunch", [exec]() {
    for (auto& op : exec->ops) op();
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  const DeviceLock lock(g_device);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kOptinSmem) return fail(cudaErrorInvalidValue);
    g_max_dynamic_smem[func] = value;
  }
  return cudaSuccess;
}

namespace emu {
cudaError_t submit_host_work(cudaStream_t stream, const char* what, std::function<void()> op) {
  const DeviceLock lock(g_device);
  return submit(stream, what, std::move(op));
}
}  // namespace emu
