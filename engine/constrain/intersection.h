// intersection.h — the strings two regular rules both derive (a format and a pattern, a
// pattern and its lookaheads), as new rules: each rule runs as a deterministic automaton, the
// pairs of their states are explored breadth first, and the pairs that can still finish are
// written back, one rule per pair. Inside JSON strings (`json_string`) each escape is written
// whole in one alternative, so that lengths in characters still count right.
#pragma once
#include <cstdint>
#include <string>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

enum class Combine {
  BOTH,              // strings of the first rule that the second derives too
  FIRST_NOT_SECOND,  // strings of the first rule that the second does not derive
};

// At most this many state pairs are explored; more is a 400 naming `what`.
inline constexpr size_t kMaxIntersectionStates = 10'000;

// A rule deriving the combination. Both rules may hold only bytes and rule calls, with
// no recursion other than repetition (what regex.cpp writes). Throws InputError naming
// `what` when no string is left, or when the automaton grows past the limit.
uint32_t add_intersection(GrammarBuilder& b, uint32_t first, uint32_t second, Combine how, const std::string& what,
                          bool json_string = true);

}  // namespace spark::constrain
