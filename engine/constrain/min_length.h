// min_length.h — how many bytes, at least, still complete a value from a matcher's state:
// the shortest strings each grammar rule derives, and from there, for every element
// position, the shortest rest of its alternative. The matcher uses them to keep a
// constrained output able to finish within the tokens it has left (matcher.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

// Lengths saturate here (a grammar of 400,000 elements with counted repetitions can ask for
// more bytes than fit in 32 bits); nothing that long fits in a token budget anyway.
inline constexpr uint32_t kUnreachableBytes = 0x7FFFFFFFu;
inline uint32_t add_lengths(uint32_t a, uint32_t b) {
  return uint32_t(std::min<uint64_t>(uint64_t(a) + b, kUnreachableBytes));
}

// For every position in g.elems: the fewest bytes that match the elements from there to
// the alternative's END (a string body counts its minLength, a byte per character).
// Knuth's shortest derivation algorithm (Dijkstra over rules), so deep grammars cost
// O(E log R).
std::vector<uint32_t> min_rest_lengths(const Grammar& g);

// Counted regions (grammar.h): marks the positions inside them and fills Grammar::in_region,
// min_chars and max_chars. Checks that a region holds only bytes and rule calls.
void region_chars(Grammar& g);
// The fewest and most characters of the strings rule `rule` derives, as JSON string
// contents (kUnboundedChars: no most).
std::pair<uint32_t, uint32_t> rule_chars(const Grammar& g, uint32_t rule);

// The fewest bytes that take the JSON string-body automaton from `state` back to a
// character boundary (where the string may close).
uint32_t string_body_min_close(uint8_t state);

}  // namespace spark::constrain
