// gate_up_check.h — the dense MLP's fused gate+up+SwiGLU decode
// (engine/backend/cuda/gate_up_gemv.h) on one packed matrix, for the per-format check
// programs (check_blocks, check_q8_0, check_fp8): its result against SwiGLU of the CPU
// backend's product on the same blocks, and under the emulator the bytes it reads against
// the packed weights plus the activation rows (limit 1.03, as each format's GEMV).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cuda/gate_up_gemv.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {

// The CPU backend's product x · wᵀ ([rows, 2 * inter], gate columns first) for x [rows, k].
using GateUpProduct = std::function<std::vector<float>(const std::vector<float>& x, int32_t rows)>;

// That product from two products of [rows, inter] each, `gate` and `up` (the parts' tensors
// apart: their scales are their own).
inline GateUpProduct interleaved(GateUpProduct gate, GateUpProduct up, int32_t inter) {
  return [=](const std::vector<float>& x, int32_t r) {
    const std::vector<float> g = gate(x, r), u = up(x, r);
    std::vector<float> y;
    for (int32_t t = 0; t < r; ++t) {
      y.insert(y.end(), g.begin() + long(t) * inter, g.begin() + long(t + 1) * inter);
      y.insert(y.end(), u.begin() + long(t) * inter, u.begin() + long(t + 1) * inter);
    }
    return y;
  };
}

// `w` is [2 * inter, k]: gate rows, then up rows. packed_bytes > 0 (emulator only): also
// the byte row, with packed_bytes the matrix's bytes on the device (scales included).
template <typename T>
void check_gate_up(const char* check, const std::string& name, const cuda::DeviceMatrix& w, int32_t k, int32_t inter,
                   int32_t rows, const GateUpProduct& product, cudaStream_t stream, uint64_t seed,
                   double packed_bytes = 0) {
  const std::vector<float> xf = round_half<T>(random_floats(size_t(rows) * k, seed));
  DeviceArray<T> x(to_half<T>(xf));
  DeviceArray<T> act(size_t(rows) * inter);
  act.poison();
  const std::string what = name + " fused gate_up+swiglu r=" + std::to_string(rows) + " k=" + std::to_string(k) +
                           " inter=" + std::to_string(inter) + " " + half_name<T>();
#if SPARK_CUDA_EMU
  if (packed_bytes > 0) ::emu::global_reads_begin();
#endif
  cuda::gate_up_swiglu_gemv(half_type_of<T>(), x.get(), rows, k, w, inter, act.get(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
#if SPARK_CUDA_EMU
  if (packed_bytes > 0) {
    const ::emu::GlobalReads reads = ::emu::global_reads_end();
    const double ratio = double(reads.total()) / (packed_bytes + double(rows) * k * sizeof(T));
    row(check, "bytes 8B " + what, fmt("%.4f", ratio) + fmt(" (%.1f MB read)", double(reads.total()) / 1e6),
        "<= 1.03", ratio <= 1.03);
  }
#endif
  const std::vector<float> y = product(xf, rows);
  std::vector<float> expect(size_t(rows) * inter);
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t i = 0; i < inter; ++i) {
      const float g = y[size_t(r) * 2 * inter + i], u = y[size_t(r) * 2 * inter + inter + i];
      expect[size_t(r) * inter + i] = g / (1.0f + std::exp(-g)) * u;
    }
  // The dot products are exact-weight f32 sums; the output is rounded once to T (at most
  // 2^-8 relative in BF16, 2^-11 in FP16).
  error_row(check, what, rel_error(expect, from_half(act.download())), std::is_same_v<T, cuda::f16> ? 1e-3 : 5e-3);
}

}  // namespace spark::gpu_check
