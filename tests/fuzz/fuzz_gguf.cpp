// fuzz_gguf.cpp — libFuzzer target for the GGUF parser, the tokenizer metadata reader,
// the model spec mapping and dequantization: any input must parse or throw InputError.
#include <cstdint>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/load_weights.h"
#include "engine/model/quant.h"
#include "engine/util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    spark::GgufFile f = spark::GgufFile::parse(data, size, "fuzz");
    std::vector<float> row;
    for (const spark::GgufTensorInfo& t : f.tensors) {
      // Dequantize the first row of every tensor the parser accepted (bounded work).
      if (!spark::dequant_supported(t.dtype) || t.shape.empty() || t.nbytes == 0) continue;
      int64_t cols = t.shape.back();
      if (cols > (1 << 16)) continue;
      row.resize(static_cast<size_t>(cols));
      spark::dequantize_row(t.dtype, f.tensor_data(t), row.data(), cols);
    }
    try {
      spark::read_gguf_vocab(f);
    } catch (const spark::InputError&) {
    }
    spark::ModelSpec spec = spark::spec_from_gguf(f);
    spark::gguf_hf_tensors(f, spec);
  } catch (const spark::InputError&) {
  }
  return 0;
}
