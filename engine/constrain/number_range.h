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

}  // namespace spark::constrain
