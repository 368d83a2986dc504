// gate_up_gemv.cu — the dense MLP's decode (gate_up_gemv.h): one warp per intermediate
// row i reads gate row i and up row i of the packed gate_up matrix together, through the
// format's reader (weight_readers.cuh), and writes silu(gate) x up for each activation row.
//
// Bytes. Llama-3.1-8B's gate_up is 2 x 14336 x 4096 = 117.4M weights: 66.1 MB in Q4_K,
// 124.8 MB in Q8_0, 117.4 MB in FP8 (plus its scales). The unfused path reads them once
// too (the format's GEMV), then writes the [rows, 28672] 16-bit product and a second
// kernel (swiglu.cu) reads it back and writes [rows, 14336]: at batch 1, 86 KB and one
// launch a layer more. Against the weight stream that is ~0.1% of the bytes; the saving
// is the second kernel's launch and tail (a few µs a layer, ~0.1 ms of GB10's ~21 ms a
// Q4_K_M token over 32 layers, ~0.5%; relatively more on H100, ~1.6 ms a token). The
// bytes read here are the packed weights once plus the activation rows (x is re-read
// by every warp from L1/L2), which the emulated byte table checks (check_blocks).
//
// Instructions: those of the format's GEMV (q4_k.cu, q8_0.cu, fp8.cu headers) for twice
// the rows, plus one expf a row and output. GB10 stays bandwidth-bound at 1..8 rows, as
// for the single GEMV; H100 is issue-bound for the K-quants as there.
//
// Loads in flight. A lane holds the next chunk of both rows while it multiplies the
// current ones: twice the single GEMV's bytes in flight a warp (Q4_K: ~1.1 KB, Q8_0 and
// FP8: 1 KB). 14336 rows are 1792 blocks of 8 warps: 37 waves of one block an SM on
// GB10's 48 SMs at 8 blocks an SM resident, 1.7 on H100's 132 (64 warps an SM resident),
// enough warps to cover both devices' latency-bandwidth product.
#include <string>
#include <type_traits>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gate_up_gemv.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// gate row i is gate's row i, up row i is up's row up_row0 + i (one reader over both
// halves of one segment, up_row0 = inter; or one reader a part, up_row0 = 0). The first
// chunks are requested before waiting for the kernel ahead (programmatic launch): weights
// never change during a step, x does.
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    gate_up_swiglu_kernel(R gate, R up, int64_t up_row0, const T* __restrict__ x, int rows, int k, int inter,
                          T* __restrict__ act) {
  constexpr int V = R::kValues;
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kWarps + (threadIdx.x >> 5);
  // A warp past inter reads the last row and stores nothing: no branch around the loads.
  const int64_t gi = i < inter ? i : inter - 1, ui = up_row0 + gi;
  int c = lane * V;
  typename R::Chunk qg{}, qu{};
  if (c < k) {
    qg = gate.load(gi, c);
    qu = up.load(ui, c);
  }
  grid_dependency_wait();
  allow_dependent_launch();

  float ag[kGemvMaxRows], au[kGemvMaxRows];
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) ag[a] = au[a] = 0.0f;
  for (; c < k; c += 32 * V) {
    float wg[V], wu[V];
    gate.decode(qg, gi, c, wg);
    up.decode(qu, ui, c, wu);
    if (c + 32 * V < k) {
      qg = gate.load(gi, c + 32 * V);
      qu = up.load(ui, c + 32 * V);
    }
#pragma unroll
    for (int a = 0; a < kGemvMaxRows; ++a) {
      if (a < rows) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + int64_t(a) * k + c);
#pragma unroll
        for (int h = 0; h < V / 8; ++h) {
          const uint4 raw = __ldg(xp + h);
          const T* xs = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float xv = to_f32(xs[j]);
            ag[a] = fmaf(wg[8 * h + j], xv, ag[a]);
            au[a] = fmaf(wu[8 * h + j], xv, au[a]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) {
    if (a < rows) {
      const float g = warp_sum(ag[a]) * row_scale(gate, gi), u = warp_sum(au[a]) * row_scale(up, ui);
      // silu as swiglu.cu computes it (the accurate expf).
      if (lane == 0 && i < inter) act[int64_t(a) * inter + i] = from_f32<T>(g / (1.0f + expf(-g)) * u);
    }
  }
}

// The gate part and the up part of w ([2 * inter, k]) as one-segment matrices, and the
// row of the up part where up row 0 is.
struct Halves {
  DeviceMatrix gate, up;
  int64_t matrix_rows = 0, up_row0 = 0;
};
Halves halves_of(const DeviceMatrix& w, int32_t inter) {
  Halves h{w, w, 2 * int64_t(inter), inter};
  if (w.tail) {
    h.gate.tail = nullptr;
    h.up = *w.tail;
    h.matrix_rows = inter;
    h.up_row0 = 0;
  }
  return h;
}

}  // namespace

bool gate_up_fusable(const DeviceMatrix& w, int32_t inter, int32_t k) {
  if (w.format == WeightFormat::HALF || inter <= 0 || k <= 0 || k % block_values(w.format) != 0) return false;
  if (!w.tail) return true;
  return w.rows == inter && w.tail->format == w.format && w.tail->tail == nullptr &&
         (w.tail->rows == 0 || w.tail->rows == inter);
}

void gate_up_swiglu_gemv(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w,
                         int32_t inter, void* act, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(gate_up_fusable(w, inter, k), "gate_up_swiglu_gemv: gate_up is not one packed format in whole blocks");
  SPARK_CHECK(rows >= 1 && rows <= kGemvMaxRows, "gate_up_swiglu_gemv: rows must be 1..8, got " + std::to_string(rows));
  SPARK_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && act != nullptr, "gate_up_swiglu_gemv: x must be 16-byte aligned");
  const Halves h = halves_of(w, inter);
  const dim3 grid{unsigned(ceil_div(inter, kWarps))}, block{kThreads};
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(h.gate, h.matrix_rows, k, [&](auto gate) {
      with_weight_reader<T>(h.up, h.matrix_rows, k, [&](auto up) {
        using R = decltype(gate);
        if constexpr (std::is_same_v<R, decltype(up)>)
          launch_kernel("gate_up_swiglu_kernel", programmatic, gate_up_swiglu_kernel<T, R>, grid, block, 0, stream,
                        gate, up, h.up_row0, static_cast<const T*>(x), int(rows), int(k), int(inter),
                        static_cast<T*>(act));
      });
    });
  });
}

}  // namespace spark::cuda
