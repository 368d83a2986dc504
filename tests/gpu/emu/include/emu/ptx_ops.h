// ptx_ops.h — the emulated PTX the kernels reach through engine/backend/cuda/ptx.cuh:
// tensor-core mma and ldmatrix as warp collectives with the PTX ISA fragment layouts,
// cp.async (eager, or deferred to its wait_group to expose missing waits), the
// shared-window loads and stores, and griddepcontrol.wait.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "emu/vector_types.h"

namespace emu {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d = c in place.
void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1);
// The same with f16 operands (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32).
void mma_f16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1);
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16.
void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4], bool trans);

void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);

uint4 ld_shared_v4(uint32_t addr);
void st_shared_v4(uint32_t addr, const uint4& v);
void st_shared_b32(uint32_t addr, uint32_t v);

// One thread's cp.async copies not yet performed (deferred mode): groups in commit order,
// the last one still open.
struct CpAsyncQueue {
  struct Copy {
    uint32_t dst;
    const void* src;
    uint32_t src_bytes;
  };
  std::vector<std::vector<Copy>> committed;
  std::vector<Copy> open;
  void clear() {
    committed.clear();
    open.clear();
  }
};
CpAsyncQueue& current_cp_async_queue();

// griddepcontrol.wait: launches run one after another here, so the kernel ahead has
// always finished; what is checked is that every thread of a programmatic launch calls
// it (a thread that exits without it reports a device error).
void grid_dependency_wait();

}  // namespace emu
