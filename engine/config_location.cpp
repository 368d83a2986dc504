// config_location.cpp — quoting a config line under an error message (config_location.h).
#include "engine/config_location.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace spark {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Calls visit(number, line) for lines 1..last of text, without their line ends.
template <typename Visit>
void for_lines(std::string_view text, int last, Visit visit) {
  size_t start = 0;
  for (int n = 1; n <= last && start <= text.size(); ++n) {
    size_t end = text.find('\n', start);
    std::string_view l = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    visit(n, l);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
}

bool is_key_text(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '"' ||
           c == '\'' || c == ' ';
  });
}

}  // namespace

ConfigOrigin origin_in_text(const std::string& source, std::string_view text, int line, int column) {
  ConfigOrigin origin{source + ":" + std::to_string(line) + ":" + std::to_string(column), ""};
  std::string_view quoted;
  bool found = false;
  for_lines(text, line, [&](int n, std::string_view l) {
    if (n == line) quoted = l, found = true;
  });
  if (!found) return origin;
  // Byte offset of each code point (toml++ counts columns in code points).
  std::vector<size_t> starts;
  for (size_t i = 0; i < quoted.size(); ++i)
    if ((static_cast<unsigned char>(quoted[i]) & 0xC0) != 0x80) starts.push_back(i);
  size_t caret = std::min<size_t>(column > 0 ? size_t(column - 1) : 0, starts.size());
  // A long line is shown as a window around the column.
  constexpr size_t kBefore = 60, kShown = 120;
  size_t first = caret > kBefore ? caret - kBefore : 0;
  size_t last = std::min(starts.size(), first + kShown);
  std::string shown = first ? "..." : "", marker = first ? "   " : "";
  size_t begin = first < starts.size() ? starts[first] : quoted.size();
  size_t end = last < starts.size() ? starts[last] : quoted.size();
  for (size_t i = begin; i < end; ++i) {
    unsigned char c = static_cast<unsigned char>(quoted[i]);
    // Control bytes from a hostile file must not move the terminal's cursor.
    shown += (c < 0x20 && c != '\t') || c == 0x7f ? '?' : char(c);
  }
  if (end < quoted.size()) shown += "...";
  for (size_t k = first; k < caret; ++k) marker += quoted[starts[k]] == '\t' ? '\t' : ' ';
  std::string number = std::to_string(line);
  std::string gutter(std::max<size_t>(5, number.size() + 1), ' ');
  origin.quote = "\n" + gutter.substr(number.size()) + number + " | " + shown + "\n" + gutter + " | " + marker + "^";
  return origin;
}

std::string key_on_line(std::string_view text, int line) {
  std::string section, key;
  for_lines(text, line, [&](int n, std::string_view raw) {
    std::string_view l = trim(raw);
    if (!l.empty() && l.front() == '[') {
      std::string_view name = l.substr(std::min(l.size(), l.find_first_not_of('[')));
      name = trim(name.substr(0, name.find(']')));
      section = std::string(name);
      if (n == line) key = "[" + section + "]";
      return;
    }
    if (n != line || l.empty() || l.front() == '#') return;
    size_t eq = l.find('=');
    std::string_view name = trim(l.substr(0, eq));
    if (eq == std::string_view::npos || !is_key_text(name)) return;
    key = section.empty() ? std::string(name) : "[" + section + "] " + std::string(name);
  });
  return key;
}

}  // namespace spark
