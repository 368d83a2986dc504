// scheduler.h — the emulator's internal entry point from the runtime into the fiber scheduler.
#pragma once
#include <cstddef>

#include "emu/device.h"

namespace emu {

struct LaunchInfo {
  const char* name;
  dim3 grid, block;
  size_t smem;
  KernelBody body;
  bool programmatic;  // cudaLaunchAttributeProgrammaticStreamSerialization
};

// Runs every block of the launch; false when a device error was reported (see device_error).
bool run_grid(const LaunchInfo& launch);

}  // namespace emu
