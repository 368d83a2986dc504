// unicode.cpp — UTF-8 decoding/encoding and Python str operations on code points.
#include "engine/template/jinja/unicode.h"

#include "engine/tokenizer/utf8.h"

#include <utf8proc.h>

namespace spark::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    int need = c >= 0xF0 && c <= 0xF4 ? 3 : c >= 0xE0 ? (c <= 0xEF ? 2 : -1) : c >= 0xC2 ? 1 : -1;
    char32_t cp = need == 1 ? (c & 0x1F) : need == 2 ? (c & 0x0F) : (c & 0x07);
    bool ok = need > 0 && i + need < s.size();
    if (ok) {
      for (int k = 1; k <= need; ++k) {
        unsigned char d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xC0) != 0x80) { ok = false; break; }
        cp = (cp << 6) | (d & 0x3F);
      }
    }
    if (ok) {
      // Reject overlong forms, surrogates and values past U+10FFFF.
      if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
          (cp >= 0xD800 && cp <= 0xDFFF))
        ok = false;
    }
    if (!ok) {
      out.push_back(0xDC00 + c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += need + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte goes back out as that byte
    out.push_back(static_cast<char>(cp - 0xDC00));
    return;
  }
  utf8::append(out, cp);
}

std::string utf8_encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

static utf8proc_category_t category(char32_t cp) {
  if (cp > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool py_isspace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool py_isalpha(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool py_isdigit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return category(cp) == UTF8PROC_CATEGORY_ND;
}

bool py_isalnum(char32_t cp) {
  if (py_isalpha(cp) || py_isdigit(cp)) return true;
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool py_isupper(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return cp <= 0x10FFFF && utf8proc_isupper(static_cast<utf8proc_int32_t>(cp));
}

bool py_islower(char32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return cp <= 0x10FFFF && utf8proc_islower(static_cast<utf8proc_int32_t>(cp));
}

bool py_iscased(char32_t cp) {
  if (cp < 0x80) return py_isupper(cp) || py_islower(cp);
  return py_isupper(cp) || py_islower(cp) || category(cp) == UTF8PROC_CATEGORY_LT;
}

static char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp > 0x10FFFF) return cp;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}

static char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp > 0x10FFFF) return cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

static char32_t to_title(char32_t cp) {
  if (cp < 0x80) return to_upper(cp);
  if (cp > 0x10FFFF) return cp;
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

template <typename F>
static std::string map_codepoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back(static_cast<char>(f(static_cast<char32_t>(c))));
    return out;
  }
  for (char32_t cp : utf8_decode(s)) utf8_append(out, f(cp));
  return out;
}

std::string py_upper(std::string_view s) { return map_codepoints(s, to_upper); }
std::string py_lower(std::string_view s) { return map_codepoints(s, to_lower); }
std::string py_swapcase(std::string_view s) {
  return map_codepoints(s, [](char32_t cp) {
    return py_isupper(cp) ? to_lower(cp) : py_islower(cp) ? to_upper(cp) : cp;
  });
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : utf8_decode(s)) {
    char32_t mapped = previous_cased ? to_lower(cp) : to_title(cp);
    previous_cased = py_iscased(cp);
    utf8_append(out, mapped);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t cp : utf8_decode(s)) {
    utf8_append(out, first ? to_title(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string cps = utf8_decode(s);
  std::u32string set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : py_isspace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, long long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long long>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string cps = utf8_decode(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && py_isspace(cps[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(cps[e - 1])) --e;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(cps[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<long long>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    return {out.rbegin(), out.rend()};
  }
  std::u32string cps = utf8_decode(s);
  long long j = static_cast<long long>(cps.size());
  while (true) {
    while (j > 0 && py_isspace(cps[j - 1])) --j;
    if (j <= 0) break;
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
      size_t b = 0;
      while (static_cast<long long>(b) < j && py_isspace(cps[b])) ++b;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(b, j - b)));
      break;
    }
    long long i = j;
    while (i > 0 && !py_isspace(cps[i - 1])) --i;
    out.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
    j = i;
  }
  return {out.rbegin(), out.rend()};
}

static bool is_line_break(char32_t cp) {
  switch (cp) {
    case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x85:
    case 0x2028: case 0x2029:
      return true;
    default:
      return false;
  }
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string cps = utf8_decode(s);
  size_t i = 0, n = cps.size();
  while (i < n) {
    size_t j = i;
    while (j < n && !is_line_break(cps[j])) ++j;
    size_t eol = j;
    if (j < n) {
      if (cps[j] == '\r' && j + 1 < n && cps[j + 1] == '\n') j += 2;
      else j += 1;
    }
    out.push_back(utf8_encode(std::u32string_view(cps).substr(i, (keepends ? j : eol) - i)));
    i = j;
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       long long count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::u32string cps = utf8_decode(s);
    long long done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) { out += new_text; ++done; }
      utf8_append(out, cp);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  long long done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old_text, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(new_text);
    pos = at + old_text.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

long long py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<long long>(utf8_length(s)) + 1;
  long long n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

long long py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<long long>(utf8_length(s.substr(0, at)));
}

}  // namespace spark::jinja
