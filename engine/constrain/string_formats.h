// string_formats.h — the inside of JSON strings as grammar rules: one character (for
// length bounds), a regex pattern (JSON Schema's search semantics, leading lookaheads too),
// the formats date-time, date, time, duration, email, uuid, uri, ipv4, ipv6 and those
// pydantic writes (string_formats.cpp; unknown formats are refused), and a format with a
// pattern.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/constrain/grammar.h"
#include "engine/constrain/regex.h"

namespace spark::constrain {

// One multi-byte UTF-8 character (well-formed: no overlongs, surrogates or > U+10FFFF).
uint32_t add_utf8_multibyte_char(GrammarBuilder& b);
// One character of a JSON string as written: unescaped or an escape sequence.
uint32_t add_json_string_char(GrammarBuilder& b);
// One character of bare text (a tab, newline or carriage return, printable ASCII, or a
// multi-byte UTF-8 character), as a tool call's XML writes its string values.
uint32_t add_text_char(GrammarBuilder& b);
// What may stand between the quotes of a string with this format / pattern (or, in TEXT
// context, what bare text may hold).
uint32_t add_string_format(GrammarBuilder& b, const std::string& format, RegexContext context = RegexContext::JSON_STRING);
uint32_t add_string_pattern(GrammarBuilder& b, std::string_view pattern, RegexContext context = RegexContext::JSON_STRING);
// The strings of both (JSON Schema's `format` beside a `pattern`, as zod writes them).
uint32_t add_string_format_and_pattern(GrammarBuilder& b, const std::string& format, std::string_view pattern,
                                       RegexContext context = RegexContext::JSON_STRING);

}  // namespace spark::constrain
