// cuda.h (emulated) — nothing of the driver API is used; present so includes resolve.
#pragma once
#include "cuda_runtime.h"
