// flags.cpp — parsing of subcommand flags.
#include "engine/util/flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "engine/util/check.h"

namespace spark {

Flags::Flags(const std::vector<std::string>& args, std::vector<std::string> switches)
    : switches_(std::move(switches)) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    size_t eq = name.find('=');
    bool is_switch = std::find(switches_.begin(), switches_.end(), name) != switches_.end();
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (is_switch) {
      value = "true";
    } else {
      if (i + 1 >= args.size()) throw InputError("flag --" + name + " needs a value");
      value = args[++i];
    }
    values_.emplace_back(name, value);
  }
}

std::optional<std::string> Flags::get(const std::string& name) const {
  std::optional<std::string> found;
  for (const auto& [k, v] : values_)
    if (k == name) found = v;
  return found;
}

std::string Flags::require(const std::string& name) const {
  auto v = get(name);
  if (!v) throw InputError("missing required flag --" + name);
  return *v;
}

std::vector<std::string> Flags::get_all(const std::string& name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values_)
    if (k == name) out.push_back(v);
  return out;
}

bool Flags::has(const std::string& name) const { return get(name).has_value(); }

long long Flags::get_int(const std::string& name, long long fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE)
    throw InputError("flag --" + name + " expects an integer, got '" + *v + "'");
  return n;
}

double Flags::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(d))
    throw InputError("flag --" + name + " expects a number, got '" + *v + "'");
  return d;
}

void Flags::expect_only(const std::vector<std::string>& known) const {
  for (const auto& [k, v] : values_) {
    bool ok = std::find(known.begin(), known.end(), k) != known.end() ||
              std::find(switches_.begin(), switches_.end(), k) != switches_.end();
    if (!ok) throw InputError("unknown flag --" + k);
  }
  if (!positional_.empty()) throw InputError("unexpected argument '" + positional_.front() + "'");
}

}  // namespace spark
