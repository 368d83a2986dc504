// intersection.cpp — two regular rules combined through their deterministic automata.
#include "engine/constrain/intersection.h"

#include <array>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "engine/util/check.h"

namespace spark::constrain {
namespace {

using Stack = std::vector<uint32_t>;  // positions still to match, innermost last
constexpr size_t kMaxStackDepth = 256;
constexpr size_t kMaxThreads = 4096;  // call stacks in one automaton state
constexpr int kDead = -1;

// Bytes that every reachable byte set treats alike share a class, so each state is stepped
// once per class, not once per byte. Inside JSON strings '\' stands alone: escapes are
// written whole.
struct ByteClasses {
  std::array<uint16_t, 256> of{};
  std::vector<uint8_t> first;  // a byte of each class
  std::vector<ByteSet> members;

  ByteClasses(const Grammar& g, const std::vector<uint32_t>& rules, bool backslash_alone) {
    std::vector<char> seen_rule(g.rules.size(), 0), seen_set(g.byte_sets.size(), 0);
    std::vector<uint32_t> todo = rules;
    ByteSet backslash;
    backslash.add('\\');
    std::vector<const ByteSet*> sets;
    if (backslash_alone) sets.push_back(&backslash);
    while (!todo.empty()) {
      const uint32_t r = todo.back();
      todo.pop_back();
      if (seen_rule[r]) continue;
      seen_rule[r] = 1;
      for (uint32_t start : g.rules[r])
        for (uint32_t pos = start; g.elems[pos].kind != ElemKind::END; ++pos) {
          const Elem& e = g.elems[pos];
          if (e.kind == ElemKind::RULE) todo.push_back(e.index);
          if (e.kind == ElemKind::BYTES && !seen_set[e.index])
            seen_set[e.index] = 1, sets.push_back(&g.byte_sets[e.index]);
        }
    }
    size_t count = 1;
    for (const ByteSet* s : sets) {
      std::map<std::pair<uint16_t, bool>, uint16_t> split;
      for (int b = 0; b < 256; ++b) {
        auto [it, added] = split.try_emplace({of[b], s->has(uint8_t(b))}, uint16_t(split.size()));
        of[b] = it->second;
      }
      count = split.size();
    }
    first.assign(count, 0);
    members.assign(count, ByteSet{});
    for (int b = 256; b-- > 0;) first[of[b]] = uint8_t(b), members[of[b]].add(uint8_t(b));
  }
};

// One rule as a deterministic automaton, built as it is walked: a state is the set of call
// stacks waiting on a byte, and whether a stack has finished.
class RuleAutomaton {
 public:
  RuleAutomaton(const Grammar& g, uint32_t rule, const ByteClasses& classes, const std::string& what)
      : g_(g), classes_(classes), what_(what) {
    std::set<Stack> threads;
    bool accept = false;
    for (uint32_t start : g.rules[rule]) close({start}, threads, accept);
    start_ = state_of(std::move(threads), accept);
  }

  int start() const { return start_; }
  bool accepts(int s) const { return s != kDead && states_[size_t(s)].accept; }

  int next(int s, uint16_t cls) {
    if (s == kDead) return kDead;
    int& cached = states_[size_t(s)].next[cls];
    if (cached != kUnknown) return cached;
    const uint8_t byte = classes_.first[cls];
    std::set<Stack> threads;
    bool accept = false;
    for (const Stack& t : states_[size_t(s)].threads) {
      if (!g_.byte_sets[g_.elems[t.back()].index].has(byte)) continue;
      Stack after = t;
      ++after.back();
      close(std::move(after), threads, accept);
    }
    const int n = state_of(std::move(threads), accept);
    states_[size_t(s)].next[cls] = n;  // not `cached`: state_of may have moved the states
    return n;
  }

 private:
  static constexpr int kUnknown = -2;
  struct State {
    std::set<Stack> threads;
    bool accept;
    std::vector<int> next;
  };

  // Follows calls and returns from `stack` to the stacks that wait on a byte. A call in
  // tail position returns straight to its caller, so repetition keeps stacks short.
  void close(Stack stack, std::set<Stack>& out, bool& accept) const {
    std::vector<Stack> work{std::move(stack)};
    std::set<Stack> seen;
    while (!work.empty()) {
      Stack s = std::move(work.back());
      work.pop_back();
      if (s.empty()) {
        accept = true;
        continue;
      }
      if (s.size() > kMaxStackDepth) throw InputError(what_ + ": nested too deeply to combine");
      if (!seen.insert(s).second) continue;
      const uint32_t pos = s.back();
      const Elem& e = g_.elems[pos];
      switch (e.kind) {
        case ElemKind::END:
          s.pop_back();
          work.push_back(std::move(s));
          break;
        case ElemKind::BYTES:
          out.insert(std::move(s));
          if (out.size() > kMaxThreads) throw InputError(what_ + ": too many alternatives at once to combine");
          break;
        case ElemKind::RULE:
          if (g_.elems[pos + 1].kind == ElemKind::END)
            s.pop_back();
          else
            s.back() = pos + 1;
          for (uint32_t start : g_.rules[e.index]) {
            Stack callee = s;
            callee.push_back(start);
            work.push_back(std::move(callee));
          }
          break;
        default:
          throw InputError(what_ + ": only regular rules can be combined");
      }
    }
  }

  int state_of(std::set<Stack> threads, bool accept) {
    if (threads.empty() && !accept) return kDead;
    auto [it, added] = ids_.try_emplace({accept, threads}, int(states_.size()));
    if (added) {
      if (states_.size() >= kMaxIntersectionStates)
        throw InputError(what_ + ": combining them takes more than " + std::to_string(kMaxIntersectionStates) + " automaton states");
      states_.push_back({std::move(threads), accept, std::vector<int>(classes_.first.size(), kUnknown)});
    }
    return it->second;
  }

  const Grammar& g_;
  const ByteClasses& classes_;
  const std::string& what_;
  std::vector<State> states_;
  std::map<std::pair<bool, std::set<Stack>>, int> ids_;
  int start_ = kDead;
};

}  // namespace

uint32_t add_intersection(GrammarBuilder& b, uint32_t first, uint32_t second, Combine how, const std::string& what,
                          bool json_string) {
  // Explore the pairs first: the builder's grammar must not grow while the automata read it.
  const Grammar& g = b.grammar();
  const ByteClasses classes(g, {first, second}, json_string);
  RuleAutomaton a(g, first, classes, what), c(g, second, classes, what);
  const bool both = how == Combine::BOTH;
  std::map<std::pair<int, int>, uint32_t> ids;
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::vector<std::pair<uint16_t, uint32_t>>> edges;  // (class, pair)
  std::vector<char> accepting;
  auto pair_id = [&](int x, int y) {
    auto [it, added] = ids.try_emplace({x, y}, uint32_t(pairs.size()));
    if (added) {
      if (pairs.size() >= kMaxIntersectionStates)
        throw InputError(what + ": combining them takes more than " + std::to_string(kMaxIntersectionStates) + " automaton states");
      pairs.push_back({x, y});
      edges.emplace_back();
      accepting.push_back(a.accepts(x) && (both ? c.accepts(y) : !c.accepts(y)));
    }
    return it->second;
  };
  pair_id(a.start(), c.start());
  for (uint32_t p = 0; p < pairs.size(); ++p)
    for (uint16_t cls = 0; cls < classes.first.size(); ++cls) {
      const int x = a.next(pairs[p].first, cls);
      const int y = c.next(pairs[p].second, cls);
      if (x == kDead || (both && y == kDead)) continue;
      const uint32_t to = pair_id(x, y);
      edges[p].push_back({cls, to});
    }

  // Keep the pairs from which an accepting one can be reached.
  std::vector<std::vector<uint32_t>> from(pairs.size());
  for (uint32_t p = 0; p < pairs.size(); ++p)
    for (const auto& [cls, to] : edges[p]) from[to].push_back(p);
  std::vector<char> live(pairs.size(), 0);
  std::vector<uint32_t> todo;
  for (uint32_t p = 0; p < pairs.size(); ++p)
    if (accepting[p]) live[p] = 1, todo.push_back(p);
  while (!todo.empty()) {
    const uint32_t p = todo.back();
    todo.pop_back();
    for (uint32_t q : from[p])
      if (!live[q]) live[q] = 1, todo.push_back(q);
  }
  if (!live[0]) throw InputError("no string matches " + what);

  // One rule per pair reached: an alternative per next pair (its bytes, then that pair's
  // rule), and an empty one where it accepts. An escape is written whole in one
  // alternative ('\', its letter, and after "\u" four more bytes), so that a character
  // count sees one character (min_length.cpp).
  std::vector<int64_t> rule_of(pairs.size(), -1);
  std::vector<uint32_t> emit;
  auto rule_for = [&](uint32_t p) {
    if (rule_of[p] < 0) rule_of[p] = b.new_rule(), emit.push_back(p);
    return uint32_t(rule_of[p]);
  };
  auto targets = [&](uint32_t p) {
    std::map<uint32_t, ByteSet> by_target;
    for (const auto& [cls, to] : edges[p])
      if (live[to])
        for (int w = 0; w < 4; ++w) by_target[to].bits[w] |= classes.members[cls].bits[w];
    return by_target;
  };
  // The alternatives that go on from `p` through `left` more bytes of an escape.
  std::function<void(uint32_t, uint32_t, std::vector<Elem>&, int)> escape = [&](uint32_t rule, uint32_t p,
                                                                                std::vector<Elem>& seq, int left) {
    for (auto& [to, set] : targets(p)) {
      if (left < 0) {  // the letter after '\': "\u" goes on for four hex digits
        ByteSet letter = set;
        if (letter.has('u')) {
          letter.remove('u');
          seq.push_back(b.byte('u'));
          escape(rule, to, seq, 3);
          seq.pop_back();
        }
        if (letter.empty()) continue;
        seq.push_back(b.bytes(letter));
        seq.push_back(GrammarBuilder::call(rule_for(to)));
        b.add_alt(rule, seq);
        seq.resize(seq.size() - 2);
        continue;
      }
      seq.push_back(b.bytes(set));
      if (left == 0) {
        seq.push_back(GrammarBuilder::call(rule_for(to)));
        b.add_alt(rule, seq);
        seq.pop_back();
      } else {
        escape(rule, to, seq, left - 1);
      }
      seq.pop_back();
    }
  };
  const uint32_t root = rule_for(0);
  while (!emit.empty()) {
    const uint32_t p = emit.back();
    emit.pop_back();
    const uint32_t rule = uint32_t(rule_of[p]);
    for (auto& [to, set] : targets(p)) {
      if (json_string && set.has('\\')) {
        std::vector<Elem> seq{b.byte('\\')};
        escape(rule, to, seq, -1);
        set.remove('\\');
        if (set.empty()) continue;
      }
      b.add_alt(rule, {b.bytes(set), GrammarBuilder::call(rule_for(to))});
    }
    if (accepting[p]) b.add_alt(rule, {});
  }
  return root;
}

}  // namespace spark::constrain
