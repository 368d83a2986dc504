// scheduler.cpp — runs a kernel launch on the CPU: one block at a time, one fiber per CUDA
// thread, switched cooperatively at __syncthreads and at warp collectives (shuffles,
// votes, mma, ldmatrix), which rendezvous the lanes of a warp and exchange their values.
// A block that can make no progress (a divergent barrier, a lane missing from a
// collective) is reported as a deadlock and abandoned; the launch then fails.
#include <sys/mman.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emu/device.h"
#include "emu/ptx_ops.h"
#include "emu/scheduler.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

// The hand-rolled context switch (x86-64 SysV): saves the callee-saved registers on the
// current stack, stores its pointer in *save, and resumes the stack `next`.
extern "C" void emu_ctx_switch(void** save, void* next);
asm(R"(
  .text
  .globl emu_ctx_switch
  .type emu_ctx_switch,@function
emu_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_ctx_switch, .-emu_ctx_switch
)");

// Every __shared__ variable lives in this section (see prelude.h).
extern "C" char __start_emu_shared[] __attribute__((weak));
extern "C" char __stop_emu_shared[] __attribute__((weak));

namespace emu {

const uint3* g_thread_idx = nullptr;
uint3 g_block_idx{0, 0, 0};
dim3 g_block_dim, g_grid_dim;

namespace {

enum class State : uint8_t { Ready, Barrier, Warp, Done };

struct Fiber {
  void* sp = nullptr;
  uint3 idx{0, 0, 0};
  int linear = 0;
  State state = State::Ready;
  uint64_t wait_gen = 0;
  const void* wait_group = nullptr;
  const char* waiting_in = nullptr;
  CpAsyncQueue cp_async;
  bool waited_for_grid = false;  // called grid_dependency_wait
  void* asan_fake = nullptr;
};

// The lanes of one mask: disjoint masks of a warp (e.g. groups of 8 lanes reducing apart)
// run their collectives independently, each with its own ring of exchange slots.
struct Group {
  uint32_t mask = 0, arrived = 0;
  uint64_t gen = 0;
  const char* what = nullptr;
  WarpSlot slots[4];
};

struct Warp {
  uint32_t exited = 0, exists = 0;
  std::vector<std::unique_ptr<Group>> groups;
  Group* group_for(uint32_t mask) {
    for (auto& gr : groups)
      if (gr->mask == mask) return gr.get();
    groups.push_back(std::make_unique<Group>());
    groups.back()->mask = mask;
    return groups.back().get();
  }
};

#if EMU_ASAN
constexpr size_t kStackBytes = 1u << 20;
#else
constexpr size_t kStackBytes = 512u << 10;
#endif
constexpr size_t kGuardBytes = 4096;

struct Sched {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  char* stacks = nullptr;
  size_t num_stacks = 0;
  void* main_sp = nullptr;
  Fiber* cur = nullptr;
  int live = 0, bar_arrived = 0;
  const LaunchInfo* launch = nullptr;
  uint8_t* dyn = nullptr;
  size_t dyn_bytes = 0;
  int errors = 0;
  bool stacks_dirty = false;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
  void* main_fake = nullptr;
} g;

char* stack_base(int i) { return g.stacks + size_t(i) * (kStackBytes + kGuardBytes) + kGuardBytes; }

void ensure_stacks(size_t n) {
  if (n <= g.num_stacks) return;
  if (g.stacks) munmap(g.stacks, g.num_stacks * (kStackBytes + kGuardBytes));
  const size_t bytes = n * (kStackBytes + kGuardBytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("emu: mmap of fiber stacks");
    std::abort();
  }
  g.stacks = static_cast<char*>(p);
  g.num_stacks = n;
  // A guard page under each stack turns a fiber's stack overflow into a crash, not corruption.
  for (size_t i = 0; i < n; ++i) mprotect(g.stacks + i * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
}

// Switch from the running fiber back to the scheduler loop.
void to_scheduler(bool exiting) {
  Fiber* f = g.cur;
#if EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f->asan_fake, g.main_stack_bottom, g.main_stack_size);
#endif
  emu_ctx_switch(&f->sp, g.main_sp);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, nullptr, nullptr);
#endif
  (void)exiting;
}

void release_barrier() {
  g.bar_arrived = 0;
  for (Fiber& f : g.fibers)
    if (f.state == State::Barrier) f.state = State::Ready;
}

void fiber_main() {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.main_stack_bottom, &g.main_stack_size);
#endif
  g.launch->body();
  Fiber* f = g.cur;
  if (g.launch->programmatic && !f->waited_for_grid)
    device_error("a thread of a programmatic launch exited without griddepcontrol.wait");
  f->state = State::Done;
  f->cp_async.clear();  // copies never waited for: nothing can read them any more
  --g.live;
  g.warps[size_t(f->linear / 32)].exited |= 1u << (f->linear % 32);
  if (g.bar_arrived > 0 && g.bar_arrived == g.live) release_barrier();
  to_scheduler(true);
  std::abort();  // an exited fiber is never resumed
}

void init_fiber(Fiber& f, int i) {
  char* top = stack_base(i) + kStackBytes;
  auto* w = reinterpret_cast<uintptr_t*>(top);
  // The frame emu_ctx_switch pops: six registers, then the return address (fiber_main),
  // which sits 16-byte aligned so fiber_main starts as if just called.
  w[-1] = 0;
  w[-2] = reinterpret_cast<uintptr_t>(&fiber_main);
  for (int r = 3; r <= 8; ++r) w[-r] = 0;
  f.sp = &w[-8];
  f.state = State::Ready;
  f.waiting_in = nullptr;
  f.cp_async.clear();
  f.waited_for_grid = false;
  f.asan_fake = nullptr;
}

__attribute__((no_sanitize_address)) void poison_bytes(void* p, size_t n) {
  volatile auto* b = static_cast<volatile uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = 0xFF;
}

std::string describe_deadlock() {
  std::string s;
  int at_barrier = 0, done = 0;
  for (const Fiber& f : g.fibers) {
    at_barrier += f.state == State::Barrier;
    done += f.state == State::Done;
  }
  s += std::to_string(at_barrier) + " threads at __syncthreads, " + std::to_string(done) + " exited";
  for (size_t w = 0; w < g.warps.size(); ++w) {
    const Warp& wp = g.warps[w];
    for (const auto& gr : wp.groups) {
      if (!gr->arrived) continue;
      char b[256];
      std::snprintf(b, sizeof b, "; warp %zu waits in %s: mask 0x%08x, arrived 0x%08x, exited 0x%08x", w,
                    gr->what ? gr->what : "?", gr->mask, gr->arrived, wp.exited);
      s += b;
    }
  }
  return s;
}

// Runs one block; false when it deadlocked.
bool run_block() {
  const int n = int(g.fibers.size());
  if (__start_emu_shared && static_cast<char*>(__stop_emu_shared) > static_cast<char*>(__start_emu_shared))
    poison_bytes(__start_emu_shared, size_t(__stop_emu_shared - __start_emu_shared));
  if (g.dyn_bytes) poison_bytes(g.dyn, g.dyn_bytes);
#if EMU_ASAN
  if (g.stacks_dirty) {  // an abandoned block left its frames' redzones poisoned
    for (int i = 0; i < int(g.num_stacks); ++i) __asan_unpoison_memory_region(stack_base(i), kStackBytes);
    g.stacks_dirty = false;
  }
#endif
  for (int i = 0; i < n; ++i) init_fiber(g.fibers[size_t(i)], i);
  for (Warp& w : g.warps) {
    w.exited = 0;
    for (auto& gr : w.groups) gr->arrived = 0, gr->what = nullptr;
  }
  g.live = n;
  g.bar_arrived = 0;
  // EMU_ORDER=reverse runs the threads of a block last to first between barriers: a
  // read of another thread's write that lacks a barrier then sees the other order.
  static const bool reverse = [] {
    const char* e = std::getenv("EMU_ORDER");
    return e && std::strcmp(e, "reverse") == 0;
  }();
  for (;;) {
    bool progress = false;
    for (int k = 0; k < n; ++k) {
      const int i = reverse ? n - 1 - k : k;
      Fiber& f = g.fibers[size_t(i)];
      if (f.state != State::Ready) continue;
      g.cur = &f;
      g_thread_idx = &f.idx;
#if EMU_ASAN
      __sanitizer_start_switch_fiber(&g.main_fake, stack_base(i), kStackBytes);
#endif
      emu_ctx_switch(&g.main_sp, f.sp);
#if EMU_ASAN
      __sanitizer_finish_switch_fiber(g.main_fake, nullptr, nullptr);
#endif
      progress = true;
    }
    if (g.live == 0) return true;
    if (!progress) {
      device_error("deadlock: %s", describe_deadlock().c_str());
      g.stacks_dirty = true;
      return false;
    }
  }
}

}  // namespace

int lane_id() { return g.cur->linear & 31; }

void sync_threads() {
  Fiber* f = g.cur;
  f->state = State::Barrier;
  if (++g.bar_arrived == g.live) {
    release_barrier();
    return;
  }
  to_scheduler(false);
}

const WarpSlot& warp_collective(uint32_t mask, const void* in, size_t bytes, const char* what, WarpComplete complete,
                                const void* ctx) {
  Fiber* f = g.cur;
  const int lane = f->linear & 31;
  Warp& w = g.warps[size_t(f->linear / 32)];
  const uint32_t bit = 1u << lane;
  if (!(mask & bit)) device_error("%s by lane %d, which is not in its own mask 0x%08x", what, lane, mask);
  if (mask & ~w.exists)
    device_error("%s with mask 0x%08x names lanes that do not exist (warp has 0x%08x)", what, mask, w.exists);
  for (auto& other : w.groups)
    if (other->arrived && other->mask != mask && (other->mask & mask))
      device_error("lane %d reached %s (mask 0x%08x) while lanes 0x%08x wait in %s (mask 0x%08x)", lane, what, mask,
                   other->arrived, other->what, other->mask);
  Group& gr = *w.group_for(mask);
  if (gr.arrived == 0) {
    gr.what = what;
  } else if (gr.what != what) {
    device_error("lane %d reached %s while lanes 0x%08x of its mask 0x%08x wait in %s", lane, what, gr.arrived, mask,
                 gr.what);
  }
  WarpSlot& s = gr.slots[gr.gen & 3];
  if (bytes) std::memcpy(s.in[lane], in, bytes);
  gr.arrived |= bit;
  if ((gr.arrived & mask) == mask) {
    if (complete) complete(s, mask, ctx);
    gr.arrived = 0;
    const uint64_t done = gr.gen++;
    const int first = f->linear & ~31;
    for (int l = 0; l < 32 && first + l < int(g.fibers.size()); ++l) {
      Fiber& o = g.fibers[size_t(first + l)];
      if (o.state == State::Warp && o.wait_group == &gr && o.wait_gen == done) o.state = State::Ready;
    }
    return s;
  }
  f->state = State::Warp;
  f->wait_gen = gr.gen;
  f->wait_group = &gr;
  f->waiting_in = what;
  to_scheduler(false);
  return s;
}

void* dynamic_smem() { return g.dyn; }

// The 32-bit shared window: dynamic shared memory at 0, the static __shared__ section at 16 MiB.
constexpr uint32_t kStaticWindow = 1u << 24;

uint32_t shared_addr(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (g.dyn && b >= g.dyn && b <= g.dyn + g.dyn_bytes) return uint32_t(b - g.dyn);
  const auto* s = reinterpret_cast<const uint8_t*>(__start_emu_shared);
  const auto* e = reinterpret_cast<const uint8_t*>(__stop_emu_shared);
  if (s && b >= s && b <= e) return kStaticWindow + uint32_t(b - s);
  device_error("__cvta_generic_to_shared of %p, which is not shared memory", p);
  return 0xFFFFFFF0u;
}

void* shared_ptr(uint32_t addr, size_t bytes) {
  static uint8_t scratch[64];
  if (addr < kStaticWindow) {
    if (size_t(addr) + bytes <= g.dyn_bytes) return g.dyn + addr;
  } else {
    const auto* s = reinterpret_cast<uint8_t*>(__start_emu_shared);
    const auto* e = reinterpret_cast<uint8_t*>(__stop_emu_shared);
    const size_t off = addr - kStaticWindow;
    if (s && off + bytes <= size_t(e - s)) return __start_emu_shared + off;
  }
  device_error("shared access of %zu bytes at 0x%x is outside the block's %zu bytes of dynamic shared memory", bytes,
               addr, g.dyn_bytes);
  poison_bytes(scratch, sizeof scratch);
  return scratch;
}

CpAsyncQueue& current_cp_async_queue() { return g.cur->cp_async; }

void grid_dependency_wait() { g.cur->waited_for_grid = true; }

void device_error(const char* fmt, ...) {
  ++g.errors;
  if (g.errors > 8) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g.cur && g.launch)
    std::fprintf(stderr, "EMU ERROR in %s, block (%u,%u,%u) thread (%u,%u,%u): %s\n", g.launch->name, g_block_idx.x,
                 g_block_idx.y, g_block_idx.z, g.cur->idx.x, g.cur->idx.y, g.cur->idx.z, msg);
  else
    std::fprintf(stderr, "EMU ERROR: %s\n", msg);
  if (g.errors == 8) std::fprintf(stderr, "EMU: further errors of this launch not shown\n");
}

#if EMU_ASAN
// An ASan report from inside a kernel names the CUDA thread that made the access.
void on_asan_report(const char*) {
  if (g.cur && g.launch)
    std::fprintf(stderr, "EMU: the report above is from %s, block (%u,%u,%u) thread (%u,%u,%u)\n", g.launch->name,
                 g_block_idx.x, g_block_idx.y, g_block_idx.z, g.cur->idx.x, g.cur->idx.y, g.cur->idx.z);
}
#endif

bool run_grid(const LaunchInfo& launch) {
#if EMU_ASAN
  static const bool hooked = [] {
    __asan_set_error_report_callback(on_asan_report);
    return true;
  }();
  (void)hooked;
#endif
  const int n = int(launch.block.x * launch.block.y * launch.block.z);
  ensure_stacks(size_t(n));
  g.fibers.assign(size_t(n), Fiber{});
  g.warps.clear();
  g.warps.resize(size_t((n + 31) / 32));
  for (int i = 0; i < n; ++i) {
    Fiber& f = g.fibers[size_t(i)];
    f.linear = i;
    f.idx = {unsigned(i) % launch.block.x, (unsigned(i) / launch.block.x) % launch.block.y,
             unsigned(i) / (launch.block.x * launch.block.y)};
    g.warps[size_t(i / 32)].exists |= 1u << (i % 32);
  }
  g.launch = &launch;
  ++g_launch_serial;
  g.errors = 0;
  g.dyn_bytes = launch.smem;
  g.dyn = static_cast<uint8_t*>(std::malloc(launch.smem ? launch.smem : 1));
  g_block_dim = launch.block;
  g_grid_dim = launch.grid;
  bool ok = true;
  for (unsigned z = 0; z < launch.grid.z && ok; ++z)
    for (unsigned y = 0; y < launch.grid.y && ok; ++y)
      for (unsigned x = 0; x < launch.grid.x && ok; ++x) {
        g_block_idx = {x, y, z};
        ok = run_block();
      }
  std::free(g.dyn);
  g.dyn = nullptr;
  g.dyn_bytes = 0;
  g.cur = nullptr;
  g.launch = nullptr;
  return ok && g.errors == 0;
}

}  // namespace emu
