// prelude.h — force-included first in every emulated translation unit: the CUDA keywords
// and qualifiers as plain C++ (see tests/gpu/emu/README.md for the whole design).
#pragma once

#ifndef SPARK_CUDA_EMU
#define SPARK_CUDA_EMU 1
#endif

// Device code runs as ordinary host functions.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one at a time, so a function-local static is exactly one block's shared
// variable. The section lets the scheduler poison all of them at each block start
// (real shared memory starts with whatever the previous block left there).
#define __shared__ __attribute__((section("emu_shared"))) static
#define __constant__ static
