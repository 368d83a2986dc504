// ptx_ops.cpp — emulated inline PTX (see ptx_ops.h): tensor-core mma and ldmatrix follow
// the PTX ISA fragment layouts exactly; cp.async copies eagerly or at its wait_group.
#include "emu/ptx_ops.h"

#include <cstdlib>
#include <cstring>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "emu/device.h"

namespace emu {
namespace {

const int s_trans_tag = 1;  // ldmatrix_complete's context: non-null means .trans
const int s_f16_tag = 1;    // mma_complete's context: non-null means f16 operands, else bf16

// m16n8k16: lane l = 4g + t. A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1),
// a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9); B (16x8, col): b0 = (k 2t..2t+1, n g),
// b1 = (k 2t+8..2t+9, n g); C/D: c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1).
// The lower k (or column) is the low half of each register.
void mma_complete(WarpSlot& s, uint32_t mask, const void* ctx) {
  if (mask != 0xffffffffu) device_error("mma.sync with mask 0x%08x: the whole warp must take part", mask);
  const bool f16 = ctx != nullptr;
  auto value = [f16](uint16_t bits) { return f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits); };
  auto bf16_lo = [&](uint32_t v) { return value(uint16_t(v & 0xffffu)); };
  auto bf16_hi = [&](uint32_t v) { return value(uint16_t(v >> 16)); };
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    uint32_t r[10];
    std::memcpy(r, s.in[l], sizeof r);
    const uint32_t a[4] = {r[0], r[1], r[2], r[3]};
    A[g][2 * t] = bf16_lo(a[0]), A[g][2 * t + 1] = bf16_hi(a[0]);
    A[g + 8][2 * t] = bf16_lo(a[1]), A[g + 8][2 * t + 1] = bf16_hi(a[1]);
    A[g][2 * t + 8] = bf16_lo(a[2]), A[g][2 * t + 9] = bf16_hi(a[2]);
    A[g + 8][2 * t + 8] = bf16_lo(a[3]), A[g + 8][2 * t + 9] = bf16_hi(a[3]);
    B[2 * t][g] = bf16_lo(r[4]), B[2 * t + 1][g] = bf16_hi(r[4]);
    B[2 * t + 8][g] = bf16_lo(r[5]), B[2 * t + 9][g] = bf16_hi(r[5]);
    float c[4];
    std::memcpy(c, &r[6], sizeof c);
    C[g][2 * t] = c[0], C[g][2 * t + 1] = c[1], C[g + 8][2 * t] = c[2], C[g + 8][2 * t + 1] = c[3];
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      // Products of bf16 (or f16) are exact in double; the sum is taken exactly and rounded once.
      double acc = C[rows[i]][cols[i]];
      for (int k = 0; k < 16; ++k) acc += double(A[rows[i]][k]) * double(B[k][cols[i]]);
      const float d = float(acc);
      std::memcpy(&s.out[l][i], &d, 4);
    }
  }
}

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i; lane l receives in
// register i the pair (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i, or with .trans
// the pair (rows 2(l%4), 2(l%4)+1; column l/4), i.e. the same of the transposed matrix.
void ldmatrix_complete(WarpSlot& s, uint32_t mask, const void* ctx) {
  const bool trans = ctx != nullptr;
  if (mask != 0xffffffffu) device_error("ldmatrix with mask 0x%08x: the whole warp must take part", mask);
  const uint8_t* row[32];
  for (int l = 0; l < 32; ++l) {
    const uint32_t addr = uint32_t(s.in[l][0]);
    if (addr & 15u) device_error("ldmatrix row address 0x%x of lane %d is not 16-byte aligned", addr, l);
    row[l] = static_cast<const uint8_t*>(shared_ptr(addr, 16));
  }
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      uint16_t lo, hi;
      if (!trans) {
        std::memcpy(&lo, row[8 * i + l / 4] + 4 * (l % 4), 2);
        std::memcpy(&hi, row[8 * i + l / 4] + 4 * (l % 4) + 2, 2);
      } else {
        std::memcpy(&lo, row[8 * i + 2 * (l % 4)] + 2 * (l / 4), 2);
        std::memcpy(&hi, row[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
      }
      s.out[l][i] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
  }
}

bool deferred_cp_async() {
  static const bool deferred = [] {
    const char* e = std::getenv("EMU_CP_ASYNC");
    return !(e && std::strcmp(e, "eager") == 0);
  }();
  return deferred;
}

void do_copy(const CpAsyncQueue::Copy& c) {
  auto* dst = static_cast<uint8_t*>(shared_ptr(c.dst, 16));
  uint8_t tmp[16] = {};
  if (c.src_bytes) std::memcpy(tmp, c.src, c.src_bytes);  // the rest is zero-filled
  std::memcpy(dst, tmp, 16);
}

}  // namespace

namespace {
void mma_16816(float (&c)[4], const uint32_t (&ab)[6], bool f16) {
  uint32_t in[10] = {ab[0], ab[1], ab[2], ab[3], ab[4], ab[5]};
  std::memcpy(&in[6], c, sizeof c);
  const int lane = lane_id();
  const WarpSlot& s = warp_collective(0xffffffffu, in, sizeof in, f16 ? "mma.sync.m16n8k16.f16" : "mma.sync.m16n8k16",
                                      mma_complete, f16 ? &s_f16_tag : nullptr);
  std::memcpy(c, s.out[lane], sizeof c);
}
}  // namespace

void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  mma_16816(c, {a0, a1, a2, a3, b0, b1}, false);
}

void mma_f16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  mma_16816(c, {a0, a1, a2, a3, b0, b1}, true);
}

void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4], bool trans) {
  const uint64_t a = addr;
  const int lane = lane_id();
  const WarpSlot& s = warp_collective(0xffffffffu, &a, sizeof a, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4",
                                      ldmatrix_complete, trans ? &s_trans_tag : nullptr);
  std::memcpy(r, s.out[lane], sizeof r);
}

void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  if (dst & 15u) device_error("cp.async destination 0x%x is not 16-byte aligned", dst);
  if (src_bytes && (reinterpret_cast<uintptr_t>(src) & 15u))
    device_error("cp.async source %p is not 16-byte aligned", src);
  if (src_bytes > 16) device_error("cp.async src-size %u exceeds the 16-byte copy", src_bytes);
  const CpAsyncQueue::Copy c{dst, src, src_bytes > 16 ? 16 : src_bytes};
  if (!deferred_cp_async()) {
    do_copy(c);
    return;
  }
  current_cp_async_queue().open.push_back(c);
}

void cp_async_commit() {
  if (!deferred_cp_async()) return;
  CpAsyncQueue& q = current_cp_async_queue();
  q.committed.push_back(std::move(q.open));
  q.open.clear();
}

void cp_async_wait(int pending) {
  if (!deferred_cp_async()) return;
  CpAsyncQueue& q = current_cp_async_queue();
  // Every committed group but the newest `pending` has landed.
  const size_t land = q.committed.size() > size_t(pending) ? q.committed.size() - size_t(pending) : 0;
  for (size_t gi = 0; gi < land; ++gi)
    for (const auto& c : q.committed[gi]) do_copy(c);
  q.committed.erase(q.committed.begin(), q.committed.begin() + long(land));
}

uint4 ld_shared_v4(uint32_t addr) {
  if (addr & 15u) device_error("ld.shared.v4 at 0x%x is not 16-byte aligned", addr);
  uint4 v;
  std::memcpy(&v, shared_ptr(addr, 16), 16);
  return v;
}

void st_shared_v4(uint32_t addr, const uint4& v) {
  if (addr & 15u) device_error("st.shared.v4 at 0x%x is not 16-byte aligned", addr);
  std::memcpy(shared_ptr(addr, 16), &v, 16);
}

void st_shared_b32(uint32_t addr, uint32_t v) {
  if (addr & 3u) device_error("st.shared.b32 at 0x%x is not 4-byte aligned", addr);
  std::memcpy(shared_ptr(addr, 4), &v, 4);
}

}  // namespace emu
