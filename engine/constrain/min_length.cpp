// min_length.cpp — shortest derivations of a grammar's rules and alternatives' rests.
#include "engine/constrain/min_length.h"

#include <array>
#include <functional>
#include <queue>
#include <utility>

#include "engine/constrain/token_table.h"

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

std::vector<uint32_t> min_rest_lengths(const Grammar& g) {
  // Each alternative: its owner rule, the bytes of its terminals, and how many rule calls
  // are still without a known shortest length.
  struct Alt {
    uint32_t start, owner, sum = 0, pending = 0;
  };
  std::vector<Alt> alts;
  std::vector<std::vector<uint32_t>> calls_of(g.rules.size());  // rule -> alts calling it (once per call)
  for (uint32_t r = 0; r < g.rules.size(); ++r)
    for (uint32_t start : g.rules[r]) {
      Alt a{start, r};
      for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) {
        const Elem& e = g.elems[pos];
        if (e.kind == ElemKind::BYTES) a.sum = add_lengths(a.sum, 1);
        if (e.kind == ElemKind::STRING_BODY) a.sum = add_lengths(a.sum, g.string_bounds[e.index].min);
        if (e.kind == ElemKind::RULE) ++a.pending, calls_of[e.index].push_back(uint32_t(alts.size()));
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
    for (uint32_t i : calls_of[rule]) {
      Alt& a = alts[i];
      a.sum = add_lengths(a.sum, length);
      if (--a.pending == 0 && !done[a.owner]) queue.push({a.sum, a.owner});
    }
  }
  std::vector<uint32_t> rest(g.elems.size(), 0);
  for (const Alt& a : alts) {
    uint32_t end = a.start;
    while (g.elems[end].kind != ElemKind::END) ++end;
    rest[end] = 0;
    for (uint32_t pos = end; pos-- > a.start;) {
      const Elem& e = g.elems[pos];
      const uint32_t own = e.kind == ElemKind::BYTES ? 1
                           : e.kind == ElemKind::RULE ? rule_min[e.index]
                                                      : g.string_bounds[e.index].min;  // a byte per character
      rest[pos] = add_lengths(own, rest[pos + 1]);
    }
  }
  return rest;
}

}  // namespace spark::constrain
