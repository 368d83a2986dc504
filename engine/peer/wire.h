// wire.h — the byte codec of the peer protocol: little-endian scalars and counted
// arrays, read back with a bounds check on every field. Nothing else is ever decoded
// from the peer: no code, no general deserializer.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/util/check.h"

namespace spark {

class WireWriter {
 public:
  void u8(uint8_t v) { put(&v, 1); }
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void i32(int32_t v) { put(&v, 4); }
  void i64(int64_t v) { put(&v, 8); }
  void f32(float v) { put(&v, 4); }
  void f64(double v) { put(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  template <typename T>
  void array(const std::vector<T>& v) {
    static_assert(std::is_arithmetic_v<T>);
    u32(static_cast<uint32_t>(v.size()));
    put(v.data(), v.size() * sizeof(T));
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  // Every supported target is little-endian (x86_64, aarch64), so the native layout is
  // the wire layout.
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<uint8_t> buf_;
};

// Reads what WireWriter wrote. Any field that runs past the end, or an array whose count
// exceeds `max_elems` or the bytes left, throws InputError naming the field.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  explicit WireReader(const std::vector<uint8_t>& v) : WireReader(v.data(), v.size()) {}

  uint8_t u8(const char* field) { return get<uint8_t>(field); }
  uint32_t u32(const char* field) { return get<uint32_t>(field); }
  uint64_t u64(const char* field) { return get<uint64_t>(field); }
  int32_t i32(const char* field) { return get<int32_t>(field); }
  int64_t i64(const char* field) { return get<int64_t>(field); }
  float f32(const char* field) { return get<float>(field); }
  double f64(const char* field) { return get<double>(field); }
  bool boolean(const char* field) {
    uint8_t v = u8(field);
    if (v > 1) throw InputError(std::string("peer frame: field '") + field + "' is " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }
  std::string str(const char* field, size_t max_bytes) {
    size_t n = count(field, 1, max_bytes);
    std::string s(reinterpret_cast<const char*>(p_), n);
    skip(n);
    return s;
  }
  template <typename T>
  std::vector<T> array(const char* field, size_t max_elems) {
    static_assert(std::is_arithmetic_v<T>);
    size_t n = count(field, sizeof(T), max_elems);
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), p_, n * sizeof(T));
    skip(n * sizeof(T));
    return v;
  }
  // Reads a count that must be at most max_elems and fit in the bytes left at
  // elem_bytes each (so a forged count never allocates beyond the frame).
  size_t count(const char* field, size_t elem_bytes, size_t max_elems) {
    uint32_t n = u32(field);
    if (n > max_elems)
      throw InputError(std::string("peer frame: '") + field + "' has " + std::to_string(n) + " entries, more than the " +
                       std::to_string(max_elems) + " allowed");
    if (elem_bytes && uint64_t(n) * elem_bytes > left_)
      throw InputError(std::string("peer frame: '") + field + "' claims " + std::to_string(n) +
                       " entries but the frame ends first");
    return n;
  }
  size_t left() const { return left_; }
  void expect_end(const char* what) const {
    if (left_ != 0)
      throw InputError(std::string("peer frame: ") + std::to_string(left_) + " unexpected bytes after the " + what);
  }

 private:
  template <typename T>
  T get(const char* field) {
    if (left_ < sizeof(T)) throw InputError(std::string("peer frame: truncated at field '") + field + "'");
    T v;
    std::memcpy(&v, p_, sizeof(T));
    skip(sizeof(T));
    return v;
  }
  void skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

}  // namespace spark
