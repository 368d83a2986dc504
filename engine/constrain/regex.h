// regex.h — regular expressions (the common ECMA/Python subset) as grammar rules: literals,
// classes with ranges and negation, \d \w \s and their negations, '.', groups, '|', and
// the quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings). Backreferences,
// lookaround and word boundaries are refused. Matching is a walk over grammar states, so
// no pattern can backtrack catastrophically; size and nesting are bounded.
#pragma once
#include <cstdint>
#include <string_view>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

enum class RegexContext {
  TEXT,         // the output text itself (guided_regex): any byte the pattern names
  JSON_STRING,  // the inside of a JSON string: '"' and '\' come out escaped, controls never
};

inline constexpr size_t kMaxRegexLength = 16 * 1024;
inline constexpr int kMaxRegexNesting = 64;

// A rule matching exactly the strings the whole pattern matches; a leading '^' and a
// trailing '$' are accepted (the match is always whole).
uint32_t add_regex(GrammarBuilder& b, std::string_view pattern, RegexContext context);

}  // namespace spark::constrain
