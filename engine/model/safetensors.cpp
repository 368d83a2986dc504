// safetensors.cpp — header validation, tensor views and sharded-index resolution.
#include "engine/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/model/dtype_table.h"
#include "engine/util/check.h"

namespace spark {
namespace {

using nlohmann::json;
constexpr uint64_t MAX_HEADER_BYTES = 100ull * 1000 * 1000;  // the limit of the reference reader

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw InputError("safetensors file '" + source + "': " + what);
}

// The checks json::parse lacks, as a pass of their own over the text: duplicate keys (the
// reference reader refuses them; nlohmann would silently keep the last) and nesting deeper
// than max_depth. (A parse callback would do both, but nlohmann's callback parser scans the
// enclosing object at the end of each one inside it: quadratic in the tensors of a header,
// minutes for the 60,000 of an NVFP4 MoE shard.)
struct StrictJsonChecks : nlohmann::json_sax<json> {
  const std::string& what;
  int max_depth;
  int depth = 0;
  std::vector<std::set<std::string>> keys;  // one set per open object
  StrictJsonChecks(const std::string& w, int d) : what(w), max_depth(d) {}
  bool open() {
    if (++depth > max_depth) throw InputError(what + ": JSON nested deeper than " + std::to_string(max_depth));
    return true;
  }
  bool start_object(std::size_t) override {
    keys.emplace_back();
    return open();
  }
  bool end_object() override {
    keys.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override {
    --depth;
    return true;
  }
  bool key(string_t& k) override {
    if (!keys.back().insert(k).second) throw InputError(what + ": duplicate name '" + k + "'");
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw InputError(what + ": invalid JSON: " + e.what());
  }
};

// Parses JSON text, refusing duplicate keys and nesting deeper than `max_depth`.
json parse_strict_json(const std::string& text, const std::string& what, int max_depth) {
  StrictJsonChecks checks(what, max_depth);
  json::sax_parse(text, &checks);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(what + ": invalid JSON: " + e.what());
  }
}

uint64_t as_u64(const json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_unsigned()) bad(source, what + " must be a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

DType safetensors_dtype(const std::string& s, const std::string& context) {
  if (const DTypeInfo* info = dtype_of_safetensors_name(s)) return info->type;
  static const char* unsupported[] = {"U16", "U32", "U64", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
  for (const char* u : unsupported)
    if (s == u) throw InputError(context + ": dtype " + s + " is not supported");
  throw InputError(context + ": unknown dtype '" + s.substr(0, 64) + "' (known: " + safetensors_dtype_list() + ")");
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& source) {
  SafetensorsFile f;
  f.source = source;
  if (size < 8) bad(source, "file of " + std::to_string(size) + " bytes is too short for a header");
  uint64_t n;
  std::memcpy(&n, data, 8);
  if (n > MAX_HEADER_BYTES)
    bad(source, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    bad(source, "header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes)");
  std::string text(reinterpret_cast<const char*>(data + 8), static_cast<size_t>(n));
  if (text.empty() || text[0] != '{') bad(source, "header is not a JSON object");
  // Objects nest at most: root -> tensor -> shape array (depth 3 in nlohmann's count).
  json h = parse_strict_json(text, "safetensors file '" + source + "'", 4);
  if (!h.is_object()) bad(source, "header is not a JSON object");

  const uint8_t* body = data + 8 + n;
  uint64_t body_len = size - 8 - n;
  struct Span { uint64_t begin, end; size_t index; };
  std::vector<Span> spans;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad(source, "__metadata__ is not an object of strings");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) bad(source, "__metadata__ value '" + k + "' is not a string");
        f.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    std::string ctx = "tensor '" + name + "'";
    if (!v.is_object()) bad(source, ctx + " is not an object");
    for (auto& [k, x] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets") bad(source, ctx + " has unknown field '" + k + "'");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad(source, ctx + " has no dtype string");
    if (!v.contains("shape") || !v["shape"].is_array()) bad(source, ctx + " has no shape array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad(source, ctx + " needs data_offsets [begin, end]");
    Tensor t;
    t.name = name;
    t.dtype = safetensors_dtype(v["dtype"].get<std::string>(), "safetensors file '" + source + "', " + ctx);
    uint64_t elems = 1;
    for (const json& d : v["shape"]) {
      uint64_t dim = as_u64(d, source, ctx + " shape entry");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim))
        bad(source, ctx + " shape product overflows");
      elems *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t begin = as_u64(v["data_offsets"][0], source, ctx + " begin offset");
    uint64_t end = as_u64(v["data_offsets"][1], source, ctx + " end offset");
    if (begin > end) bad(source, ctx + " begins at " + std::to_string(begin) + " after its end " + std::to_string(end));
    uint64_t elem_size = static_cast<uint64_t>(dtype_block_bytes(t.dtype));
    if (elems > std::numeric_limits<uint64_t>::max() / elem_size) bad(source, ctx + " byte size overflows");
    if (end - begin != elems * elem_size)
      bad(source, ctx + " holds " + std::to_string(end - begin) + " bytes but its shape and dtype need " +
                      std::to_string(elems * elem_size));
    if (end > body_len)
      bad(source, ctx + " ends at " + std::to_string(end) + ", past the data section of " +
                      std::to_string(body_len) + " bytes");
    t.data = body + begin;
    t.nbytes = static_cast<size_t>(end - begin);
    spans.push_back({begin, end, f.tensors.size()});
    f.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data section: sorted by offset, each starts where the
  // previous ended and the last ends at the end of the file.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Span& s : spans) {
    const std::string& name = f.tensors[s.index].name;
    if (s.begin < at) bad(source, "tensor '" + name + "' overlaps the previous tensor (starts at " +
                                      std::to_string(s.begin) + ", previous ends at " + std::to_string(at) + ")");
    if (s.begin > at) bad(source, "gap in the data section before tensor '" + name + "' (bytes " +
                                      std::to_string(at) + ".." + std::to_string(s.begin) + " unused)");
    at = s.end;
  }
  if (at != body_len)
    bad(source, std::to_string(body_len - at) + " trailing bytes after the last tensor");
  std::sort(f.tensors.begin(), f.tensors.end(), [](const Tensor& a, const Tensor& b) { return a.name < b.name; });
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto m = MappedFile::open(path);
  SafetensorsFile f = parse(m->data(), m->size(), path);
  f.mapping_ = std::move(m);
  return f;
}

SafetensorsModel open_safetensors_model(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsModel model;
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  fs::path single = fs::path(dir) / "model.safetensors";
  auto add_file = [&](const std::string& path) {
    auto f = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
    model.files.push_back(f);
    return f;
  };
  if (fs::exists(index)) {
    std::ifstream in(index);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string what = "'" + index.string() + "'";
    if (ss.str().size() > MAX_HEADER_BYTES) throw InputError(what + " is larger than 100 MB");
    json j = parse_strict_json(ss.str(), what, 8);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw InputError(what + " has no \"weight_map\" object");
    std::map<std::string, std::set<std::string>> by_file;
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw InputError(what + ": weight_map entry '" + name + "' is not a file name");
      std::string fn = file.get<std::string>();
      // Shards live in the folder itself: no paths, so an index cannot point elsewhere.
      if (fn.empty() || fn.find('/') != std::string::npos || fn.find('\\') != std::string::npos ||
          fn == "." || fn == "..")
        throw InputError(what + ": shard name '" + fn + "' must be a plain file name");
      by_file[fn].insert(name);
    }
    for (auto& [fn, names] : by_file) {
      auto f = add_file((fs::path(dir) / fn).string());
      for (const Tensor& t : f->tensors) {
        if (!names.count(t.name))
          throw InputError("tensor '" + t.name + "' is in shard '" + fn + "' but " + what +
                           " places it elsewhere or not at all");
        names.erase(t.name);
        model.tensors.emplace(t.name, t);
      }
      if (!names.empty())
        throw InputError(what + " places tensor '" + *names.begin() + "' in shard '" + fn +
                         "', which does not contain it");
    }
  } else if (fs::exists(single)) {
    auto f = add_file(single.string());
    for (const Tensor& t : f->tensors) model.tensors.emplace(t.name, t);
  } else {
    throw InputError("model folder '" + dir + "' has neither model.safetensors nor model.safetensors.index.json");
  }
  return model;
}

}  // namespace spark
