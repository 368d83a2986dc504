// min_length.cpp — shortest derivations of a grammar's rules and alternatives' rests.
#include "engine/constrain/min_length.h"

#include <array>
#include <functional>
#include <queue>
#include <utility>

#include "engine/constrain/token_table.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

std::array<uint32_t, kStringStates> make_close_lengths() {
  // Breadth-first search backwards from the boundary (state 0) over the automaton.
  std::array<uint32_t, kStringStates> dist;
  dist.fill(kUnreachableBytes);
  dist[0] = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (uint8_t s = 0; s < kStringStates; ++s)
      for (int b = 0; b < 256; ++b) {
        const uint8_t next = string_body_step(s, uint8_t(b));
        if (next != kStringDead && add_lengths(dist[next], 1) < dist[s]) dist[s] = add_lengths(dist[next], 1), changed = true;
      }
  }
  return dist;
}

}  // namespace

uint32_t string_body_min_close(uint8_t state) {
  static const auto lengths = make_close_lengths();
  return state < kStringStates ? lengths[state] : kUnreachableBytes;
}

namespace {

// The fewest bytes (weights null) or characters (a weight per BYTES position) each rule
// derives. Each alternative: its owner rule, the length of its terminals, and how many rule
// calls are still without a known shortest length.
std::vector<uint32_t> shortest_rules(const Grammar& g, const std::vector<uint8_t>* weights) {
  struct Alt {
    uint32_t start, owner, sum = 0, pending = 0;
  };
  std::vector<Alt> alts;
  // rule -> (alt, floor) per call: a counted region takes at least its minLength, a byte per
  // character.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> calls_of(g.rules.size());
  for (uint32_t r = 0; r < g.rules.size(); ++r)
    for (uint32_t start : g.rules[r]) {
      Alt a{start, r};
      for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) {
        const Elem& e = g.elems[pos];
        if (e.kind == ElemKind::BYTES) a.sum = add_lengths(a.sum, weights ? (*weights)[pos] : 1);
        if (e.kind == ElemKind::STRING_BODY) a.sum = add_lengths(a.sum, g.string_bounds[e.index].min);
        if (g.calls(e)) {
          ++a.pending;
          const uint32_t floor = e.kind == ElemKind::COUNTED ? g.counted[e.index].bounds.min : 0;
          calls_of[g.called(e)].push_back({uint32_t(alts.size()), floor});
        }
      }
      alts.push_back(a);
    }
  using Entry = std::pair<uint32_t, uint32_t>;  // (length, rule)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (const Alt& a : alts)
    if (a.pending == 0) queue.push({a.sum, a.owner});
  std::vector<uint32_t> rule_min(g.rules.size(), kUnreachableBytes);
  std::vector<char> done(g.rules.size(), 0);
  while (!queue.empty()) {
    const auto [length, rule] = queue.top();
    queue.pop();
    if (done[rule]) continue;
    done[rule] = 1;
    rule_min[rule] = length;
    for (const auto& [i, floor] : calls_of[rule]) {
      Alt& a = alts[i];
      a.sum = add_lengths(a.sum, std::max(length, floor));
      if (--a.pending == 0 && !done[a.owner]) queue.push({a.sum, a.owner});
    }
  }
  return rule_min;
}

}  // namespace

std::vector<uint32_t> min_rest_lengths(const Grammar& g) {
  const std::vector<uint32_t> rule_min = shortest_rules(g, nullptr);
  std::vector<uint32_t> rest(g.elems.size(), 0);
  for (const auto& starts : g.rules)
    for (uint32_t start : starts) {
      uint32_t end = start;
      while (g.elems[end].kind != ElemKind::END) ++end;
      rest[end] = 0;
      for (uint32_t pos = end; pos-- > start;) {
        const Elem& e = g.elems[pos];
        const uint32_t own = e.kind == ElemKind::BYTES ? 1
                             : e.kind == ElemKind::RULE ? rule_min[e.index]
                             : e.kind == ElemKind::COUNTED ? std::max(rule_min[g.counted[e.index].rule], g.counted[e.index].bounds.min)
                                                        : g.string_bounds[e.index].min;  // a byte per character
        rest[pos] = add_lengths(own, rest[pos + 1]);
      }
    }
  return rest;
}

namespace {

// Characters each BYTES element starts: none for UTF-8 continuation bytes and for the
// bytes of an escape after its '\' (one more, or five after "\u"); escapes never span
// alternatives or rule calls (regex.cpp and add_json_string_char write each whole).
std::vector<uint8_t> char_weights(const Grammar& g) {
  std::vector<uint8_t> w(g.elems.size(), 0);
  ByteSet backslash, u, cont;
  backslash.add('\\');
  u.add('u');
  cont.add_range(0x80, 0xBF);
  int skip = 0;
  bool after_backslash = false;
  for (size_t pos = 0; pos < g.elems.size(); ++pos) {
    const Elem& e = g.elems[pos];
    if (e.kind != ElemKind::BYTES) {
      skip = 0, after_backslash = false;
      continue;
    }
    const ByteSet& s = g.byte_sets[e.index];
    if (skip > 0) {
      skip = after_backslash && s == u ? 4 : skip - 1;
      after_backslash = false;
      continue;
    }
    bool only_cont = true;
    for (int i = 0; i < 4; ++i) only_cont = only_cont && !(s.bits[i] & ~cont.bits[i]);
    w[pos] = only_cont ? 0 : 1;
    if (s == backslash) skip = 1, after_backslash = true;
  }
  return w;
}

struct CharRanges {
  const Grammar& g;
  const std::vector<uint8_t>& w;
  const std::vector<uint32_t> fewest;  // per rule, from its shortest derivation
  std::vector<uint8_t> state;          // 0 new, 1 in progress, 2 done
  std::vector<uint32_t> most;

  CharRanges(const Grammar& grammar, const std::vector<uint8_t>& weights)
      : g(grammar), w(weights), fewest(shortest_rules(grammar, &weights)), state(grammar.rules.size(), 0), most(grammar.rules.size()) {}

  static uint32_t add_max(uint32_t a, uint32_t b) {
    return a == kUnboundedChars || b == kUnboundedChars ? kUnboundedChars : uint32_t(std::min<uint64_t>(uint64_t(a) + b, kUnboundedChars - 1));
  }
  // (fewest, most) characters of an element.
  std::pair<uint32_t, uint32_t> of(uint32_t pos) {
    const Elem& e = g.elems[pos];
    if (e.kind == ElemKind::BYTES) return {w[pos], w[pos]};
    if (e.kind == ElemKind::STRING_BODY) return {g.string_bounds[e.index].min, g.string_bounds[e.index].max == UINT32_MAX ? kUnboundedChars : g.string_bounds[e.index].max};
    auto r = of_rule(g.called(e));
    if (e.kind == ElemKind::COUNTED) {
      const StringBounds& b = g.counted[e.index].bounds;
      r.first = std::max(r.first, b.min);
      if (b.max != UINT32_MAX) r.second = std::min(r.second, b.max);
    }
    return r;
  }
  // A rule met again while in progress lies on a cycle, which matches a character each time
  // round: no most.
  std::pair<uint32_t, uint32_t> of_rule(uint32_t rule) {
    if (state[rule] == 1) return {fewest[rule], kUnboundedChars};
    if (state[rule] == 0) {
      state[rule] = 1;
      uint32_t best = 0;
      for (uint32_t start : g.rules[rule]) {
        uint32_t hi = 0;
        for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) hi = add_max(hi, of(pos).second);
        best = std::max(best, hi);
      }
      state[rule] = 2;
      most[rule] = best;
    }
    return {fewest[rule], most[rule]};
  }
};

}  // namespace

std::pair<uint32_t, uint32_t> rule_chars(const Grammar& g, uint32_t rule) {
  const auto w = char_weights(g);
  return CharRanges(g, w).of_rule(rule);
}

void region_chars(Grammar& g) {
  g.in_region.assign(g.elems.size(), 0);
  g.min_chars.assign(g.elems.size(), 0);
  g.max_chars.assign(g.elems.size(), 0);
  if (g.counted.empty()) return;
  std::vector<uint8_t> rule_in(g.rules.size(), 0);
  std::vector<uint32_t> worklist;
  for (const Counted& c : g.counted)
    if (!rule_in[c.rule]) rule_in[c.rule] = 1, worklist.push_back(c.rule);
  while (!worklist.empty()) {
    const uint32_t r = worklist.back();
    worklist.pop_back();
    for (uint32_t start : g.rules[r])
      for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) {
        const Elem& e = g.elems[pos];
        SPARK_CHECK(e.kind == ElemKind::BYTES || e.kind == ElemKind::RULE,
                    "a counted region holds only bytes and rules");
        g.in_region[pos] = 1;
        if (e.kind == ElemKind::RULE && !rule_in[e.index]) rule_in[e.index] = 1, worklist.push_back(e.index);
      }
  }
  const auto w = char_weights(g);
  CharRanges ranges(g, w);
  for (uint32_t r = 0; r < g.rules.size(); ++r) {
    if (!rule_in[r]) continue;
    for (uint32_t start : g.rules[r]) {
      uint32_t end = start;
      while (g.elems[end].kind != ElemKind::END) ++end;
      for (uint32_t pos = end; pos-- > start;) {
        const auto [a, b] = ranges.of(pos);
        g.min_chars[pos] = add_lengths(a, g.min_chars[pos + 1]);
        g.max_chars[pos] = CharRanges::add_max(b, g.max_chars[pos + 1]);
      }
    }
  }
  // The most a stack inside can need: a call's rule at its most, then the caller's rest.
  // A rule on the path (a repetition's tail call) adds nothing new.
  std::vector<uint32_t> need(g.rules.size(), 0);
  std::vector<uint8_t> state(g.rules.size(), 0);
  std::function<uint32_t(uint32_t)> max_need = [&](uint32_t r) -> uint32_t {
    if (state[r]) return need[r];
    state[r] = 1;
    uint32_t best = 0;
    for (uint32_t start : g.rules[r])
      for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) {
        const Elem& e = g.elems[pos];
        best = std::max(
            best, e.kind == ElemKind::RULE ? add_lengths(max_need(e.index), g.min_chars[pos + 1]) : g.min_chars[pos]);
      }
    state[r] = 2;
    return need[r] = best;
  };
  for (Counted& c : g.counted) c.max_need = max_need(c.rule);
}

}  // namespace spark::constrain
