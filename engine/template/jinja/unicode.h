// unicode.h — the UTF-8 and code-point helpers behind Python's str semantics
// (length, indexing and slicing count code points; case mapping and whitespace are Unicode).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spark::jinja {

// Decodes UTF-8; an invalid byte b becomes 0xDC00 + b (as Python's surrogateescape) so that
// encoding gives the original bytes back.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view cps);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);  // number of code points
bool is_ascii(std::string_view s);

bool py_isspace(char32_t cp);  // str.isspace() / str.split() / str.strip() whitespace
bool py_isalpha(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isalnum(char32_t cp);
bool py_isupper(char32_t cp);
bool py_islower(char32_t cp);
bool py_iscased(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_swapcase(std::string_view s);

// str.strip family; chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / str.rsplit; sep == nullptr splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, long long maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long long maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       long long count);
long long py_count(std::string_view s, std::string_view sub);
long long py_find(std::string_view s, std::string_view sub, bool reverse);  // code-point index or -1

}  // namespace spark::jinja
