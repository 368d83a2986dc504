// config_location.h — where a config value came from, for error messages that point at it
// the way compilers do: "file:line:column: message", then the line quoted with a caret under
// the column. Values from --set name the flag instead.
#pragma once
#include <string>
#include <string_view>

namespace spark {

struct ConfigOrigin {
  std::string prefix;  // "spark.toml:12:1", "--set engine.block_size=24" or "spark.toml"
  std::string quote;   // "\n   12 | block_size = 24\n      | ^", or "" when there is no line
};

// The origin of line:column (both from 1) of `text`, read from the file named `source`.
ConfigOrigin origin_in_text(const std::string& source, std::string_view text, int line, int column);

// "[section] key" for the key assigned on `line` of a TOML text (the section is the last
// table header above it), "[section]" for a header line, "" for any other line.
std::string key_on_line(std::string_view text, int line);

}  // namespace spark
