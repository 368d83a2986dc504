// dtype_table.cpp — the rows of the dtype table, in DType's order.
#include "engine/model/dtype_table.h"

#include <array>
#include <cstring>
#include <vector>

#include "engine/model/quant.h"
#include "engine/model/quantize.h"
#include "engine/util/check.h"

namespace spark {
namespace {

constexpr BlockScaleField none{};
constexpr BlockScaleField at(size_t offset, const char* field) { return {uint16_t(offset), field}; }

// The plain float types' encoders (the block types' are quantize.h's quantizers).
namespace encode {
void f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(float)); }
void f16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(src[i]);
    std::memcpy(static_cast<uint8_t*>(dst) + 2 * i, &h, 2);
  }
}
void bf16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(static_cast<uint8_t*>(dst) + 2 * i, &h, 2);
  }
}
}  // namespace encode

// Block layouts and GGUF type ids as GGML defines them (quant.h's structs).
constexpr std::array<DTypeInfo, size_t(DType::COUNT)> kTable{{
    {DType::F64, "F64", 1, 8, 28, true, {}, nullptr, nullptr, false},
    {DType::F32, "F32", 1, 4, 0, true, {}, decode::f32, encode::f32, true},
    {DType::F16, "F16", 1, 2, 1, true, {}, decode::f16, encode::f16, true},
    {DType::BF16, "BF16", 1, 2, 30, true, {}, decode::bf16, encode::bf16, true},
    {DType::I64, "I64", 1, 8, 27, true, {}, nullptr, nullptr, false},
    {DType::I32, "I32", 1, 4, 26, true, {}, nullptr, nullptr, false},
    {DType::I16, "I16", 1, 2, 25, true, {}, nullptr, nullptr, false},
    {DType::I8, "I8", 1, 1, 24, true, {}, nullptr, nullptr, false},
    {DType::U8, "U8", 1, 1, -1, true, {}, nullptr, nullptr, false},
    {DType::BOOL, "BOOL", 1, 1, -1, true, {}, nullptr, nullptr, false},
    {DType::F8_E4M3, "F8_E4M3", 1, 1, -1, true, {}, decode::f8_e4m3, nullptr, true},
    {DType::F8_E5M2, "F8_E5M2", 1, 1, -1, true, {}, nullptr, nullptr, false},
    {DType::Q4_0, "Q4_0", 32, sizeof(BlockQ4_0), 2, false, {at(offsetof(BlockQ4_0, d), "d"), none}, decode::q4_0,
     nullptr, false},
    {DType::Q4_1, "Q4_1", 32, sizeof(BlockQ4_1), 3, false,
     {at(offsetof(BlockQ4_1, d), "d"), at(offsetof(BlockQ4_1, m), "m")}, decode::q4_1, nullptr, false},
    {DType::Q8_0, "Q8_0", 32, sizeof(BlockQ8_0), 8, false, {at(offsetof(BlockQ8_0, d), "d"), none}, decode::q8_0,
     quantize_q8_0, true},
    {DType::Q4_K, "Q4_K", 256, sizeof(BlockQ4_K), 12, false,
     {at(offsetof(BlockQ4_K, d), "d"), at(offsetof(BlockQ4_K, dmin), "dmin")}, decode::q4_k, quantize_q4_k, true},
    {DType::Q5_K, "Q5_K", 256, sizeof(BlockQ5_K), 13, false,
     {at(offsetof(BlockQ5_K, d), "d"), at(offsetof(BlockQ5_K, dmin), "dmin")}, decode::q5_k, nullptr, false},
    {DType::Q6_K, "Q6_K", 256, sizeof(BlockQ6_K), 14, false, {at(offsetof(BlockQ6_K, d), "d"), none}, decode::q6_k,
     nullptr, false},
    // Its E8M0 scale is no half float: the half-float scale check does not apply.
    {DType::MXFP4, "MXFP4", 32, sizeof(BlockMXFP4), 39, false, {}, decode::mxfp4, quantize_mxfp4, false},
    // Its scales are E4M3 bytes: the loaders check them (nvfp4_weights.h).
    {DType::NVFP4, "NVFP4", 64, sizeof(BlockNVFP4), 40, false, {}, decode::nvfp4, nullptr, false},
    {DType::Q5_0, "Q5_0", 32, sizeof(BlockQ5_0), 6, false, {at(offsetof(BlockQ5_0, d), "d"), none}, decode::q5_0,
     nullptr, false},
    {DType::Q5_1, "Q5_1", 32, sizeof(BlockQ5_1), 7, false,
     {at(offsetof(BlockQ5_1, d), "d"), at(offsetof(BlockQ5_1, m), "m")}, decode::q5_1, nullptr, false},
}};

constexpr bool rows_in_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (kTable[i].type != DType(i)) return false;
  return true;
}
static_assert(rows_in_order(), "dtype_table.cpp: one row per DType, in the enum's order");

// The names of the rows `has` picks, separated by ", " and the last by `last`.
std::string list_of(bool (*has)(const DTypeInfo&), const char* last = ", ") {
  std::vector<const char*> names;
  for (const DTypeInfo& r : kTable)
    if (has(r)) names.push_back(r.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + std::string(names[i]);
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
std::string dummy_dtype_list() {
  return list_of([](const DTypeInfo& r) { return r.dummy; }, " or ");
}

}  // namespace spark
