// fuzz_safetensors.cpp — libFuzzer target for the safetensors header parser: any input
// must parse or throw InputError, never crash, hang or allocate without bound.
#include <cstdint>
#include <cstring>

#include "engine/model/safetensors.h"
#include "engine/util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    spark::SafetensorsFile f = spark::SafetensorsFile::parse(data, size, "fuzz");
    // Touch every byte the views claim, so a view past the buffer is caught by ASan.
    uint64_t sum = 0;
    for (const spark::Tensor& t : f.tensors) {
      const uint8_t* p = static_cast<const uint8_t*>(t.data);
      for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
    }
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const spark::InputError&) {
  }
  return 0;
}
