// xml_parameters.h — a tool call's arguments as Qwen3-Coder's XML writes them, held to the
// function's parameters schema: one block a parameter, in the schema's order (required
// ones always, the others optionally),
//   <parameter=KEY>\nVALUE\n</parameter>\n
// where VALUE is bare text typed by the parameter's schema, as the reader
// (web/chat_format/qwen3_xml.cpp) types it back: a string parameter's value is the string
// itself (its enum, const, format, pattern and lengths held on the bare text, and never the
// closing tag), every other type is JSON of its schema (numbers within +-1e15 where the
// schema gives no bounds, so that they read back as numbers), and null is `null`.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

// The type a parameter's schema declares: its "type" (the first but "null" of a list), or
// the first of its anyOf / oneOf branches that names one; "" when none does. `nullable`:
// null is among them.
std::string xml_value_type(const nlohmann::ordered_json& schema, bool& nullable);

// Bare text under a string schema's format, pattern and lengths (characters, as JSON
// Schema counts them) that never holds `never` (the tag its reader ends the text at);
// `key` names the parameter in refusals. Shared with Gemma 4's strings (gemma_arguments.h).
uint32_t add_bare_text(GrammarBuilder& b, const nlohmann::ordered_json& schema, std::string_view never,
                       const std::string& key);

// Numbers a reader can read back: JSON allows 1e999 and integers of any length, which no
// double or int64 holds (the value would stay text). Every number schema in `schema` without
// bounds gets +-1e15, the widest the number grammar takes (number_range.h).
void bound_numbers(nlohmann::ordered_json& schema);

// The parameters of a function whose parameters schema is `parameters` (an object schema).
// Throws InputError for what the format cannot write (a key holding '>' or a newline) or
// the grammar cannot hold.
uint32_t add_xml_parameters(GrammarBuilder& b, const nlohmann::ordered_json& parameters);

}  // namespace spark::constrain
