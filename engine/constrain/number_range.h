// number_range.h — JSON numbers as grammar rules, within bounds: integers in an exact
// decimal range (no leading zeros, never "-0"), and for "number" also fractions whose
// whole value stays inside the bounds. Exponents are generated only without bounds.
#pragma once
#include <cstdint>
#include <optional>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

struct NumberBounds {
  std::optional<double> minimum, maximum, exclusive_minimum, exclusive_maximum;
  bool any() const { return minimum || maximum || exclusive_minimum || exclusive_maximum; }
};

// Bounds beyond +-1e15 are refused (InputError); empty ranges too.
uint32_t add_number(GrammarBuilder& b, bool integer, const NumberBounds& bounds);

// The multiples of `step` (JSON Schema's multipleOf) within the bounds, as integers:
//   - an integer step up to kMaxModulus: decimal integers read digit by digit with their
//     remainder modulo the step as the state, so every multiple and nothing else; bounds
//     then only as far as that reading keeps them exact: none, a lower bound in
//     (-step, step] (non-negative or positive multiples) or an upper bound in [-step, step);
//   - with both bounds and at most kMaxListedMultiples multiples between them (any integer
//     step), those multiples spelled out;
//   - for "integer", a step dividing 1 (0.5, 0.1): any integer in the bounds;
//   - for "number", a step of 10^-n (0.1, 0.01, ... 1e-6) without bounds: numbers with at
//     most n decimals.
// Other steps and combinations are refused (InputError), saying which.
inline constexpr int64_t kMaxModulus = 1000;
inline constexpr int64_t kMaxListedMultiples = 1024;
uint32_t add_multiple_of(GrammarBuilder& b, bool integer, const NumberBounds& bounds, double step);

}  // namespace spark::constrain
