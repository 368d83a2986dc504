// test_dtype_table.cpp — the one table of element types: lookups by GGUF id and by
// safetensors name, and the lists error messages print. (The decoders and block sizes are
// held to gguf-py by test_quant.cpp and test_block_scales.cpp, through this table.)
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "engine/model/dtype_table.h"

using namespace spark;

TEST_CASE("dtype table: every type has one row, its name and GGUF id unique") {
  std::set<std::string> names;
  std::set<int32_t> ids;
  for (size_t i = 0; i < size_t(DType::COUNT); ++i) {
    const DTypeInfo& r = dtype_info(DType(i));
    CHECK(r.type == DType(i));
    CHECK(names.insert(r.name).second);
    if (r.ggml_type >= 0) {
      CHECK(ids.insert(r.ggml_type).second);
      CHECK(dtype_of_ggml_type(uint32_t(r.ggml_type)) == &r);
    }
    if (r.in_safetensors) CHECK(dtype_of_safetensors_name(r.name) == &r);
    CHECK(dtype_name(DType(i)) == r.name);
    CHECK(r.block_elems >= 1);
    CHECK(r.block_bytes >= 1);
    // A block-quantized type carries a scale the NaN check reads, or says why not (MXFP4).
    if (r.block_elems > 1 && r.type != DType::MXFP4) CHECK(r.scales[0].field != nullptr);
  }
}

TEST_CASE("dtype table: lookups miss what no row has") {
  CHECK(dtype_of_ggml_type(10) == nullptr);  // Q2_K
  CHECK(dtype_of_ggml_type(1000) == nullptr);
  CHECK(dtype_of_safetensors_name("Q4_K") == nullptr);  // a GGUF block type, not a safetensors dtype
  CHECK(dtype_of_safetensors_name("F8_E8M0") == nullptr);
  CHECK(dtype_of_ggml_type(12)->type == DType::Q4_K);
  CHECK(dtype_of_safetensors_name("BF16")->type == DType::BF16);
  CHECK(gguf_dtype_list() == "F64, F32, F16, BF16, I64, I32, I16, I8, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4");
  CHECK(safetensors_dtype_list() == "F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2");
}
