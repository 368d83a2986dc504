// gemma_arguments.h — a tool call's arguments as Gemma 4 writes them, held to the function's
// parameters schema: {key:VALUE,...} with bare keys, where a string VALUE is
// <|"|>text<|"|> (raw text that never holds <|"|>; enum, const, format, pattern and lengths
// held on it), and numbers, true, false, null, objects and arrays are written as JSON writes
// them (objects in this notation again). Properties come sorted by key, case-insensitively,
// as the template's dictsort prints them and the model learned them. The schema is walked
// by the JSON Schema compiler (json_schema.h), so what it refuses is refused here by the same
// name. The reader is web/chat_format/gemma4.cpp.
#pragma once
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

inline constexpr std::string_view kGemmaQuote = "<|\"|>";

// The arguments object of a function whose parameters schema is `parameters`. Throws
// InputError for what the grammar cannot hold or the notation cannot write.
uint32_t add_gemma_arguments(GrammarBuilder& b, const nlohmann::ordered_json& parameters);

}  // namespace spark::constrain
