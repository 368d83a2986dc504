// dtype_table.cpp — the rows of the dtype table, in DType's order.
#include "engine/model/dtype_table.h"

#include <array>

#include "engine/model/quant.h"
#include "engine/util/check.h"

namespace spark {
namespace {

constexpr BlockScaleField none{};
constexpr BlockScaleField at(size_t offset, const char* field) { return {uint16_t(offset), field}; }

// Block layouts and GGUF type ids as GGML defines them (quant.h's structs).
constexpr std::array<DTypeInfo, size_t(DType::COUNT)> kTable{{
    {DType::F64, "F64", 1, 8, 28, true, {}, nullptr},
    {DType::F32, "F32", 1, 4, 0, true, {}, decode::f32},
    {DType::F16, "F16", 1, 2, 1, true, {}, decode::f16},
    {DType::BF16, "BF16", 1, 2, 30, true, {}, decode::bf16},
    {DType::I64, "I64", 1, 8, 27, true, {}, nullptr},
    {DType::I32, "I32", 1, 4, 26, true, {}, nullptr},
    {DType::I16, "I16", 1, 2, 25, true, {}, nullptr},
    {DType::I8, "I8", 1, 1, 24, true, {}, nullptr},
    {DType::U8, "U8", 1, 1, -1, true, {}, nullptr},
    {DType::BOOL, "BOOL", 1, 1, -1, true, {}, nullptr},
    {DType::F8_E4M3, "F8_E4M3", 1, 1, -1, true, {}, decode::f8_e4m3},
    {DType::F8_E5M2, "F8_E5M2", 1, 1, -1, true, {}, nullptr},
    {DType::Q4_0, "Q4_0", 32, sizeof(BlockQ4_0), 2, false, {at(offsetof(BlockQ4_0, d), "d"), none}, decode::q4_0},
    {DType::Q4_1, "Q4_1", 32, sizeof(BlockQ4_1), 3, false,
     {at(offsetof(BlockQ4_1, d), "d"), at(offsetof(BlockQ4_1, m), "m")}, decode::q4_1},
    {DType::Q8_0, "Q8_0", 32, sizeof(BlockQ8_0), 8, false, {at(offsetof(BlockQ8_0, d), "d"), none}, decode::q8_0},
    {DType::Q4_K, "Q4_K", 256, sizeof(BlockQ4_K), 12, false,
     {at(offsetof(BlockQ4_K, d), "d"), at(offsetof(BlockQ4_K, dmin), "dmin")}, decode::q4_k},
    {DType::Q5_K, "Q5_K", 256, sizeof(BlockQ5_K), 13, false,
     {at(offsetof(BlockQ5_K, d), "d"), at(offsetof(BlockQ5_K, dmin), "dmin")}, decode::q5_k},
    {DType::Q6_K, "Q6_K", 256, sizeof(BlockQ6_K), 14, false, {at(offsetof(BlockQ6_K, d), "d"), none}, decode::q6_k},
    // Its E8M0 scale is no half float: the half-float scale check does not apply.
    {DType::MXFP4, "MXFP4", 32, sizeof(BlockMXFP4), 39, false, {}, decode::mxfp4},
}};

constexpr bool rows_in_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (kTable[i].type != DType(i)) return false;
  return true;
}
static_assert(rows_in_order(), "dtype_table.cpp: one row per DType, in the enum's order");

std::string list_of(bool (*has)(const DTypeInfo&)) {
  std::string out;
  for (const DTypeInfo& r : kTable)
    if (has(r)) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

}  // namespace

const DTypeInfo& dtype_info(DType t) {
  SPARK_CHECK(size_t(t) < kTable.size(), "not a DType: " + std::to_string(int(t)));
  return kTable[size_t(t)];
}

const DTypeInfo* dtype_of_ggml_type(uint32_t ggml_type) {
  for (const DTypeInfo& r : kTable)
    if (r.ggml_type >= 0 && uint32_t(r.ggml_type) == ggml_type) return &r;
  return nullptr;
}

const DTypeInfo* dtype_of_safetensors_name(std::string_view name) {
  for (const DTypeInfo& r : kTable)
    if (r.in_safetensors && name == r.name) return &r;
  return nullptr;
}

std::string gguf_dtype_list() {
  return list_of([](const DTypeInfo& r) { return r.ggml_type >= 0; });
}
std::string safetensors_dtype_list() {
  return list_of([](const DTypeInfo& r) { return r.in_safetensors; });
}

}  // namespace spark
