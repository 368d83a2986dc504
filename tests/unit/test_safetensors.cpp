// test_safetensors.cpp — the safetensors reader against the reference package's reading
// of the same file, and every malformed-header case of PRACTICES.md.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <unistd.h>

#include "engine/model/safetensors.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden;
using spark::testing::golden_dir;

namespace {

// 8-byte little-endian length, the header text, then `data_len` data bytes.
std::vector<uint8_t> st_bytes(const std::string& header, size_t data_len, std::optional<uint64_t> declared = {}) {
  uint64_t n = declared.value_or(header.size());
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_len; ++i) out.push_back(static_cast<uint8_t>(i * 7 + 1));
  return out;
}

SafetensorsFile parse(const std::vector<uint8_t>& b) { return SafetensorsFile::parse(b.data(), b.size(), "t.safetensors"); }

std::string tmp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("sparkd_st_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

void write(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

}  // namespace

TEST_CASE("safetensors: every dtype matches the reference reader byte for byte") {
  auto g = golden()["safetensors"];
  SafetensorsFile f = SafetensorsFile::open(golden_dir() + "/" + g["file"].get<std::string>());
  REQUIRE(f.tensors.size() == g["tensors"].size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const Tensor& t = f.tensors[i];
    const auto& ref = g["tensors"][i];
    CAPTURE(t.name);
    CHECK(t.name == ref["name"].get<std::string>());
    CHECK(std::string(dtype_name(t.dtype)) == ref["dtype"].get<std::string>());
    CHECK(t.shape == ref["shape"].get<std::vector<int64_t>>());
    auto bytes = spark::testing::from_hex(ref["hex"].get<std::string>());
    REQUIRE(t.nbytes == bytes.size());
    CHECK(std::memcmp(t.data, bytes.data(), bytes.size()) == 0);
  }
  CHECK(f.metadata == g["metadata"].get<std::map<std::string, std::string>>());
}

TEST_CASE("safetensors: header length 2^64-1, over 100 MB, or past the end of the file") {
  CHECK_INPUT_ERROR(parse(st_bytes("{}", 0, UINT64_MAX)), "exceeds the 100 MB limit");
  CHECK_INPUT_ERROR(parse(st_bytes("{}", 0, 100'000'001)), "exceeds the 100 MB limit");
  CHECK_INPUT_ERROR(parse(st_bytes("{}", 0, 1000)), "runs past the end of the file");
  CHECK_INPUT_ERROR(parse(std::vector<uint8_t>{1, 2, 3}), "too short for a header");
}

TEST_CASE("safetensors: offsets must tile the data section") {
  std::string ab = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(ab, 12)), "overlaps the previous tensor");
  std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(gap, 12)), "gap in the data section");
  std::string rev = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(rev, 8)), "after its end");
  std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(one, 9)), "5 trailing bytes");
  CHECK_INPUT_ERROR(parse(st_bytes(one, 3)), "past the data section");
  CHECK(parse(st_bytes(one, 4)).tensors.size() == 1);
}

TEST_CASE("safetensors: shape and size validation") {
  std::string big = R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(big, 4)), "shape product overflows");
  std::string bytes_ovf = R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(bytes_ovf, 4)), "overflows");
  std::string wrong = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(wrong, 4)), "holds 4 bytes but its shape and dtype need 8");
  std::string neg = R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(neg, 4)), "non-negative integer");
  std::string frac = R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(frac, 4)), "non-negative integer");
  std::string offs = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(offs, 4)), "data_offsets");
}

TEST_CASE("safetensors: duplicate names, unknown dtypes, headers that are not objects") {
  std::string dup = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(dup, 8)), "duplicate name 'a'");
  std::string unk = R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(unk, 4)), "unknown dtype 'F17'");
  std::string uns = R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})";
  CHECK_INPUT_ERROR(parse(st_bytes(uns, 4)), "dtype U16 is not supported");
  CHECK_INPUT_ERROR(parse(st_bytes("[1,2]", 0)), "header is not a JSON object");
  CHECK_INPUT_ERROR(parse(st_bytes("\"x\"", 0)), "header is not a JSON object");
  CHECK_INPUT_ERROR(parse(st_bytes("{\"a\":", 0)), "invalid JSON");
  CHECK_INPUT_ERROR(parse(st_bytes(R"({"a":5})", 0)), "is not an object");
  CHECK_INPUT_ERROR(parse(st_bytes(R"({"__metadata__":{"k":1}})", 0)), "is not a string");
  // Deep nesting is refused by depth, not by exhausting the stack.
  std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  CHECK_INPUT_ERROR(parse(st_bytes(deep, 0)), "nested deeper");
  // Header padding with spaces, as the reference writer produces, is accepted.
  CHECK(parse(st_bytes("{}     ", 0)).tensors.empty());
}

TEST_CASE("safetensors: every truncation of a valid file is a clean error") {
  auto g = golden()["safetensors"];
  auto bytes = spark::testing::read_file(golden_dir() + "/" + g["file"].get<std::string>());
  REQUIRE(bytes.size() > 100);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    std::string msg = spark::testing::input_error_of([&] { parse(cut); });
    CHECK_MESSAGE(msg.find("safetensors file") != std::string::npos, "prefix ", n, ": ", msg);
  }
}

TEST_CASE("safetensors: sharded folders resolve the index strictly") {
  std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string two = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string d = tmp_dir("shard");
  write(d + "/s1.safetensors", st_bytes(one, 4));
  write(d + "/s2.safetensors", st_bytes(two, 4));
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  SafetensorsModel m = open_safetensors_model(d);
  CHECK(m.files.size() == 2);
  CHECK(m.tensors.size() == 2);
  CHECK(m.tensors.count("a") == 1);

  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s2.safetensors","b":"s2.safetensors"}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "which does not contain it");
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors"}})");
  CHECK(open_safetensors_model(d).tensors.size() == 1);
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "does not contain it");
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"../s1.safetensors"}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "must be a plain file name");
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"missing.safetensors"}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "cannot open");
  write(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "duplicate name 'a'");
  write(d + "/model.safetensors.index.json", R"({"metadata":{}})");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "weight_map");
  std::filesystem::remove(d + "/model.safetensors.index.json");
  CHECK_INPUT_ERROR(open_safetensors_model(d), "neither model.safetensors nor");
  // An empty file is a clean error too (mmap of length 0 is never attempted).
  write(d + "/model.safetensors", std::string());
  CHECK_INPUT_ERROR(open_safetensors_model(d), "too short for a header");
  std::filesystem::remove_all(d);
}
