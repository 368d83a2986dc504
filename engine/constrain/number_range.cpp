// number_range.cpp — decimal ranges as grammar rules, digit by digit.
#include "engine/constrain/number_range.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/util/check.h"

namespace spark::constrain {
namespace {

using Bound = std::optional<int64_t>;
constexpr double kMaxBound = 1e15;

int64_t pow10(size_t n) {
  int64_t p = 1;
  while (n--) p *= 10;
  return p;
}

ByteSet digit_set(char lo, char hi) {
  ByteSet s;
  s.add_range(uint8_t(lo), uint8_t(hi));
  return s;
}

class RangeBuilder {
 public:
  explicit RangeBuilder(GrammarBuilder& b) : b_(b), digit_(b.rule_of({{b.bytes(digit_set('0', '9'))}})) {}

  uint32_t digits(size_t n) { return b_.repeat(digit_, int64_t(n), int64_t(n)); }

  // Decimal strings of equal length between x and y (x <= y), digit by digit.
  uint32_t same_length(const std::string& x, const std::string& y) {
    const size_t n = x.size();
    if (n == 0) return b_.empty_rule();
    const std::string xr = x.substr(1), yr = y.substr(1);
    if (x[0] == y[0]) return b_.rule_of({{b_.byte(uint8_t(x[0])), GrammarBuilder::call(same_length(xr, yr))}});
    if (xr.find_first_not_of('0') == std::string::npos && yr.find_first_not_of('9') == std::string::npos)
      return b_.rule_of({{b_.bytes(digit_set(x[0], y[0])), GrammarBuilder::call(digits(n - 1))}});
    const uint32_t r = b_.new_rule();
    b_.add_alt(r, {b_.byte(uint8_t(x[0])), GrammarBuilder::call(same_length(xr, std::string(n - 1, '9')))});
    if (x[0] + 1 <= y[0] - 1)
      b_.add_alt(r, {b_.bytes(digit_set(char(x[0] + 1), char(y[0] - 1))), GrammarBuilder::call(digits(n - 1))});
    b_.add_alt(r, {b_.byte(uint8_t(y[0])), GrammarBuilder::call(same_length(std::string(n - 1, '0'), yr))});
    return r;
  }

  // Non-negative integers in [lo, hi] (hi absent: no upper bound), canonical decimal.
  uint32_t magnitudes(int64_t lo, Bound hi) {
    const uint32_t r = b_.new_rule();
    const size_t lo_digits = std::to_string(lo).size();
    const size_t hi_digits = hi ? std::to_string(*hi).size() : lo_digits;
    for (size_t d = lo_digits; d <= hi_digits; ++d) {
      const int64_t from = std::max(lo, d == 1 ? 0 : pow10(d - 1));
      const int64_t to = hi ? std::min(*hi, pow10(d) - 1) : pow10(d) - 1;
      if (from <= to) b_.add_alt(r, {GrammarBuilder::call(same_length(std::to_string(from), std::to_string(to)))});
    }
    if (!hi)  // every number with more digits than lo
      b_.add_alt(r, {b_.bytes(digit_set('1', '9')), GrammarBuilder::call(b_.repeat(digit_, int64_t(lo_digits), -1))});
    return r;
  }

  // Integers in [lo, hi], either side open when absent.
  uint32_t integers(Bound lo, Bound hi) {
    const uint32_t r = b_.new_rule();
    if (!hi || *hi >= 0) b_.add_alt(r, {GrammarBuilder::call(magnitudes(lo ? std::max<int64_t>(*lo, 0) : 0, hi))});
    if (!lo || *lo < 0) {
      // "-0" is a JSON spelling of zero; allowed where zero is, as in an unbounded integer.
      const int64_t m_lo = hi && *hi < 0 ? -*hi : 0;
      b_.add_alt(r, {b_.byte('-'), GrammarBuilder::call(magnitudes(m_lo, lo ? Bound(-*lo) : std::nullopt))});
    }
    return r;
  }

  uint32_t digit() const { return digit_; }

 private:
  GrammarBuilder& b_;
  uint32_t digit_;
};

int64_t checked(double v) {
  if (!std::isfinite(v) || std::fabs(v) > kMaxBound)
    throw InputError("JSON schema: numeric bounds beyond +-1e15 are not supported");
  return int64_t(v);
}

// Decimal integers whose remainder modulo k ends at 0: one rule per remainder, each digit
// moving it to (10 r + d) mod k. `zero` admits "0" itself; `sign` "-" before a nonzero one
// (and "-0", as the unbounded integers allow it).
uint32_t multiples_mod(GrammarBuilder& b, int64_t k, bool zero, bool plus, bool minus) {
  std::vector<uint32_t> rem(static_cast<size_t>(k));
  for (auto& r : rem) r = b.new_rule();
  auto by_target = [&](int64_t from, char lo, std::vector<std::pair<ByteSet, int64_t>>& out) {
    for (char d = lo; d <= '9'; ++d) {
      const int64_t to = (from * 10 + (d - '0')) % k;
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.second == to; });
      if (it == out.end()) out.push_back({ByteSet{}, to}), it = out.end() - 1;
      it->first.add(uint8_t(d));
    }
  };
  for (int64_t r = 0; r < k; ++r) {
    std::vector<std::pair<ByteSet, int64_t>> next;
    by_target(r, '0', next);
    for (const auto& [digits, to] : next) b.add_alt(rem[size_t(r)], {b.bytes(digits), GrammarBuilder::call(rem[size_t(to)])});
    if (r == 0) b.add_alt(rem[size_t(r)], {});
  }
  std::vector<std::pair<ByteSet, int64_t>> first;
  by_target(0, '1', first);
  const uint32_t nonzero = b.new_rule();
  for (const auto& [digits, to] : first) b.add_alt(nonzero, {b.bytes(digits), GrammarBuilder::call(rem[size_t(to)])});
  const uint32_t r = b.new_rule();
  if (plus) b.add_alt(r, {GrammarBuilder::call(nonzero)});
  if (minus) b.add_alt(r, {b.byte('-'), GrammarBuilder::call(nonzero)});
  if (zero) b.add_alt(r, b.literal("0"));
  if (zero && minus) b.add_alt(r, b.literal("-0"));
  return r;
}

}  // namespace

uint32_t add_multiple_of(GrammarBuilder& b, bool integer, const NumberBounds& n, double step) {
  if (!std::isfinite(step) || !(step > 0)) throw InputError("JSON schema: 'multipleOf' must be a number above 0");
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.15g", step);
  // A step dividing 1 (0.5, 0.25, 0.1): every integer is a multiple.
  const double per_unit = 1.0 / step;
  if (integer && per_unit >= 1 && std::fabs(per_unit - std::round(per_unit)) < 1e-9) return add_number(b, true, n);
  // A step of 10^-e: "number" with at most e decimals.
  for (int e = 1; e <= 6; ++e) {
    if (std::fabs(step * std::pow(10.0, e) - 1.0) > 1e-9) continue;
    if (n.any()) throw InputError(std::string("JSON schema: 'multipleOf' ") + shown + " together with bounds is not supported");
    RangeBuilder rb(b);
    const uint32_t whole = b.rule_of({b.literal("0"), {b.bytes(digit_set('1', '9')), GrammarBuilder::call(b.star(rb.digit()))}});
    const uint32_t frac = b.rule_of({{b.byte('.'), GrammarBuilder::call(b.repeat(rb.digit(), 1, e))}, {}});
    return b.rule_of({{GrammarBuilder::call(b.rule_of({b.literal("-"), {}})), GrammarBuilder::call(whole), GrammarBuilder::call(frac)}});
  }
  if (step != std::floor(step) || step > kMaxBound)
    throw InputError(std::string("JSON schema: 'multipleOf' ") + shown + " is not supported (an integer, or 0.1, 0.01, ... 1e-6)");
  const auto k = static_cast<int64_t>(step);
  // The integer bounds, as add_number reads them.
  Bound lo, hi;
  if (n.minimum) lo = checked(std::ceil(*n.minimum));
  if (n.exclusive_minimum) lo = std::max(lo.value_or(INT64_MIN), checked(std::floor(*n.exclusive_minimum)) + 1);
  if (n.maximum) hi = checked(std::floor(*n.maximum));
  if (n.exclusive_maximum) hi = std::min(hi.value_or(INT64_MAX), checked(std::ceil(*n.exclusive_maximum)) - 1);
  auto ceil_div = [](int64_t a, int64_t d) { return a >= 0 ? (a + d - 1) / d : -((-a) / d); };
  auto floor_div = [](int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); };
  if (lo && hi) {
    const int64_t first = ceil_div(*lo, k), last = floor_div(*hi, k);
    if (first > last) throw InputError("JSON schema: the numeric bounds admit no multiple of " + std::to_string(k));
    if (last - first < kMaxListedMultiples) {
      const uint32_t r = b.new_rule();
      for (int64_t m = first; m <= last; ++m) b.add_alt(r, b.literal(std::to_string(m * k)));
      return r;
    }
  }
  if (k > kMaxModulus)
    throw InputError("JSON schema: 'multipleOf' " + std::to_string(k) + " above " + std::to_string(kMaxModulus) +
                     " is supported only between bounds holding at most " + std::to_string(kMaxListedMultiples) + " multiples");
  if (!lo && !hi) return multiples_mod(b, k, true, true, true);
  if (lo && !hi && *lo > -k && *lo <= k) return multiples_mod(b, k, *lo <= 0, true, false);
  if (hi && !lo && *hi < k && *hi >= -k) return multiples_mod(b, k, *hi >= 0, false, true);
  throw InputError("JSON schema: 'multipleOf' with these bounds is not supported: both bounds with at most " +
                   std::to_string(kMaxListedMultiples) + " multiples between them, or a single bound within one step of 0");
}

uint32_t add_number(GrammarBuilder& b, bool integer, const NumberBounds& n) {
  RangeBuilder rb(b);
  if (!n.any()) {  // -?(0|[1-9][0-9]*), then for numbers (\.[0-9]+)?([eE][+-]?[0-9]+)?
    const uint32_t whole = b.rule_of({b.literal("0"), {b.bytes(digit_set('1', '9')), GrammarBuilder::call(b.star(rb.digit()))}});
    const uint32_t sign = b.rule_of({b.literal("-"), {}});
    if (integer) return b.rule_of({{GrammarBuilder::call(sign), GrammarBuilder::call(whole)}});
    const uint32_t frac = b.rule_of({{b.byte('.'), GrammarBuilder::call(b.plus(rb.digit()))}, {}});
    ByteSet e, pm;
    e.add('e'), e.add('E'), pm.add('+'), pm.add('-');
    const uint32_t exp_sign = b.rule_of({{b.bytes(pm)}, {}});
    const uint32_t exp = b.rule_of({{b.bytes(e), GrammarBuilder::call(exp_sign), GrammarBuilder::call(b.plus(rb.digit()))}, {}});
    return b.rule_of({{GrammarBuilder::call(sign), GrammarBuilder::call(whole), GrammarBuilder::call(frac), GrammarBuilder::call(exp)}});
  }
  // The real bounds (either kind), and the integer bounds they imply.
  std::optional<double> lower, upper;
  Bound lo, hi;
  if (n.minimum) lower = *n.minimum, lo = checked(std::ceil(*n.minimum));
  if (n.exclusive_minimum) {
    lower = std::max(lower.value_or(-INFINITY), *n.exclusive_minimum);
    lo = std::max(lo.value_or(INT64_MIN), checked(std::floor(*n.exclusive_minimum)) + 1);
  }
  if (n.maximum) upper = *n.maximum, hi = checked(std::floor(*n.maximum));
  if (n.exclusive_maximum) {
    upper = std::min(upper.value_or(INFINITY), *n.exclusive_maximum);
    hi = std::min(hi.value_or(INT64_MAX), checked(std::ceil(*n.exclusive_maximum)) - 1);
  }
  const bool ints_exist = !(lo && hi && *lo > *hi);
  if (integer && !ints_exist) throw InputError("JSON schema: the numeric bounds admit no integer");
  const uint32_t r = b.new_rule();
  if (ints_exist) b.add_alt(r, {GrammarBuilder::call(rb.integers(lo, hi))});
  if (!integer) {
    // k.f with a fraction that does not end in 0, so its value lies strictly between k and
    // k + 1 (or -k - 1 and -k): the whole interval must be inside the bounds.
    const uint32_t fraction =
        b.rule_of({{b.byte('.'), GrammarBuilder::call(b.star(rb.digit())), b.bytes(digit_set('1', '9'))}});
    const int64_t k_lo = lower ? std::max<int64_t>(0, checked(std::ceil(*lower))) : 0;
    const Bound k_hi = upper ? Bound(checked(std::floor(*upper)) - 1) : std::nullopt;
    if (!k_hi || *k_hi >= k_lo)
      b.add_alt(r, {GrammarBuilder::call(rb.magnitudes(k_lo, k_hi)), GrammarBuilder::call(fraction)});
    const int64_t m_lo = upper ? std::max<int64_t>(0, checked(std::ceil(-*upper))) : 0;
    const Bound m_hi = lower ? Bound(checked(std::floor(-*lower)) - 1) : std::nullopt;
    if (!m_hi || *m_hi >= m_lo)
      b.add_alt(r, {b.byte('-'), GrammarBuilder::call(rb.magnitudes(m_lo, m_hi)), GrammarBuilder::call(fraction)});
  }
  return r;
}

}  // namespace spark::constrain
