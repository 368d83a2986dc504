// byte_level.h — GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spark::byte_level {

// The character standing for byte b, UTF-8 encoded (e.g. 0x20 -> "Ġ").
const std::string& char_of(uint8_t b);
// The byte a mapped character stands for, or -1 when `cp` is not in the alphabet.
int byte_of(char32_t cp);

// Maps every byte of `raw` to its character.
std::string encode(std::string_view raw);
// Maps every character back to its byte; nullopt when a character is outside the alphabet.
std::optional<std::string> decode(std::string_view mapped);

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is set.
inline constexpr const char* GPT2_REGEX =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace spark::byte_level
