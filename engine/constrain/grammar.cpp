// grammar.cpp — building grammars and checking that the matcher can run them.
#include "engine/constrain/grammar.h"

#include "engine/constrain/min_length.h"
#include "engine/util/check.h"

namespace spark::constrain {

GrammarBuilder::GrammarBuilder() { g_.elems.reserve(1024); }

void GrammarBuilder::check_limits() const {
  if (g_.elems.size() > kMaxGrammarElems || g_.rules.size() > kMaxGrammarRules)
    throw InputError("the constraint is too large: its grammar exceeds " + std::to_string(kMaxGrammarElems) +
                     " elements or " + std::to_string(kMaxGrammarRules) + " rules");
}

uint32_t GrammarBuilder::new_rule() {
  g_.rules.emplace_back();
  check_limits();
  return uint32_t(g_.rules.size() - 1);
}

void GrammarBuilder::add_alt(uint32_t rule, const std::vector<Elem>& seq) {
  SPARK_CHECK(rule < g_.rules.size(), "unknown rule");
  g_.rules[rule].push_back(uint32_t(g_.elems.size()));
  g_.elems.insert(g_.elems.end(), seq.begin(), seq.end());
  g_.elems.push_back({ElemKind::END, 0});
  check_limits();
}

uint32_t GrammarBuilder::rule_of(const std::vector<std::vector<Elem>>& alts) {
  uint32_t r = new_rule();
  for (const auto& a : alts) add_alt(r, a);
  return r;
}

Elem GrammarBuilder::bytes(const ByteSet& set) {
  // Small grammars reuse the same few sets (digits, quote, brackets): share them.
  for (size_t i = g_.byte_sets.size(); i-- > 0 && g_.byte_sets.size() - i <= 64;)
    if (g_.byte_sets[i] == set) return {ElemKind::BYTES, uint32_t(i)};
  g_.byte_sets.push_back(set);
  return {ElemKind::BYTES, uint32_t(g_.byte_sets.size() - 1)};
}

Elem GrammarBuilder::string_body(uint32_t min, uint32_t max) {
  if (max < min) throw InputError("a string's maxLength is below its minLength");
  if (min == 0 && max == UINT32_MAX) return string_body();
  g_.string_bounds.push_back({min, max});
  return {ElemKind::STRING_BODY, uint32_t(g_.string_bounds.size() - 1)};
}

Elem GrammarBuilder::counted(uint32_t rule, uint32_t min, uint32_t max) {
  if (max < min) throw InputError("a string's maxLength is below its minLength");
  g_.counted.push_back({rule, {min, max}});
  return {ElemKind::COUNTED, uint32_t(g_.counted.size() - 1)};
}

Elem GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return bytes(s);
}

std::vector<Elem> GrammarBuilder::literal(std::string_view text) {
  std::vector<Elem> seq;
  seq.reserve(text.size());
  for (char c : text) seq.push_back(byte(uint8_t(c)));
  return seq;
}

void GrammarBuilder::add_marker(std::string_view text) {
  if (std::find(g_.markers.begin(), g_.markers.end(), text) == g_.markers.end()) g_.markers.emplace_back(text);
}

uint32_t GrammarBuilder::star(uint32_t rule) {
  uint32_t r = new_rule();
  add_alt(r, {call(rule), call(r)});
  add_alt(r, {});
  return r;
}

uint32_t GrammarBuilder::plus(uint32_t rule) { return rule_of({{call(rule), call(star(rule))}}); }

uint32_t GrammarBuilder::repeat(uint32_t rule, int64_t min, int64_t max, int64_t separator_rule) {
  if (max >= 0 && max < min) throw InputError("a repetition's maximum is below its minimum");
  if (max == 0) return empty_rule();
  std::vector<Elem> next;  // one more item after the first
  if (separator_rule >= 0) next.push_back(call(uint32_t(separator_rule)));
  next.push_back(call(rule));
  const uint32_t next_rule = rule_of({next});
  // Items after the first `min`: unbounded, or nested optionals up to the maximum.
  auto tail = [&](int64_t extra) {
    if (max < 0) return star(next_rule);
    uint32_t t = empty_rule();
    for (int64_t i = 0; i < extra; ++i) t = rule_of({{call(next_rule), call(t)}, {}});
    return t;
  };
  if (min == 0) return optional(rule_of({{call(rule), call(tail(max < 0 ? 0 : max - 1))}}));
  std::vector<Elem> seq{call(rule)};
  for (int64_t i = 1; i < min; ++i) seq.push_back(call(next_rule));
  seq.push_back(call(tail(max < 0 ? 0 : max - min)));
  return rule_of({seq});
}

std::pair<uint32_t, uint32_t> GrammarBuilder::chars_of(uint32_t rule) const { return rule_chars(g_, rule); }

Grammar GrammarBuilder::finish(uint32_t root) {
  g_.root = root;
  g_.validate();
  g_.min_rest = min_rest_lengths(g_);
  region_chars(g_);
  return std::move(g_);
}

void Grammar::validate() const {
  const size_t n = rules.size();
  // Productive rules: derive at least one finite string (a $ref cycle with no base case
  // does not). Nullable rules: derive the empty string.
  std::vector<char> productive(n, 0), nullable(n, 0);
  auto alt_ok = [&](uint32_t pos, const std::vector<char>& known, bool need_empty) {
    for (;; ++pos) {
      const Elem& e = elems[pos];
      if (e.kind == ElemKind::END) return true;
      if (calls(e)) {
        if (!known[called(e)]) return false;
        if (need_empty && e.kind == ElemKind::COUNTED && counted[e.index].bounds.min > 0) return false;
      } else if (need_empty && (e.kind == ElemKind::BYTES ||
                                (e.kind == ElemKind::STRING_BODY && string_bounds[e.index].min > 0))) {
        return false;
      }
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t start : rules[r]) {
        if (!productive[r] && alt_ok(start, productive, false)) productive[r] = 1, changed = true;
        if (!nullable[r] && alt_ok(start, nullable, true)) nullable[r] = 1, changed = true;
      }
    }
  }
  if (!productive[root])
    throw InputError("the constraint matches no value at all (a $ref cycle with no base case, or contradictory keywords)");
  // Left recursion: rule r calls r again before any byte is matched. Depth-first search
  // over the "may call first" graph, iterative so deep grammars cannot overflow the stack.
  std::vector<std::vector<uint32_t>> first_calls(n);
  for (size_t r = 0; r < n; ++r)
    for (uint32_t pos : rules[r])
      for (;; ++pos) {
        const Elem& e = elems[pos];
        if (!calls(e)) break;
        first_calls[r].push_back(called(e));
        if (!nullable[called(e)]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (size_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    path.push_back({uint32_t(s), 0});
    color[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == first_calls[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      uint32_t next = first_calls[r][i++];
      if (color[next] == 1)
        throw InputError("the constraint refers to itself before matching anything (a $ref cycle with no base case)");
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

}  // namespace spark::constrain
