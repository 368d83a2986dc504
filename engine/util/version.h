// version.h — the sparkd version string, stamped at build time.
#pragma once
#include <string>

namespace spark {

std::string version_string();  // "0.1.0 (git abc1234)"
const char* version_number();  // "0.1.0"

}  // namespace spark
