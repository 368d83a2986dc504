// flags.h — a small command-line flag reader: --name value, --name=value, --switch.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace spark {

class Flags {
 public:
  // `switches` are flags that take no value; every other --flag takes one.
  Flags(const std::vector<std::string>& args, std::vector<std::string> switches = {});

  // The value of --name (the last one if repeated); throws InputError if absent and required.
  std::optional<std::string> get(const std::string& name) const;
  std::string require(const std::string& name) const;
  std::vector<std::string> get_all(const std::string& name) const;  // every --name value, in order
  bool has(const std::string& name) const;
  long long get_int(const std::string& name, long long fallback) const;
  double get_double(const std::string& name, double fallback) const;
  // Throws InputError naming the first flag not in `known` (switches count as known).
  void expect_only(const std::vector<std::string>& known) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
  std::vector<std::string> switches_;
  std::vector<std::string> positional_;
};

}  // namespace spark
