// grammar.h — the context-free grammar over bytes that every constraint compiles to
// (JSON Schema, regex, choice), with a builder and the checks that keep hostile input
// bounded (size limits, rules that derive nothing, left recursion).
//
// Layout (llama.cpp's GBNF layout, flattened for the matcher): every alternative of every
// rule is a run of elements in one array, closed by an END element; a position is an
// index into that array. Repetition is right recursion, so the matcher's stacks stay
// shallow and no rule calls itself before consuming a byte (checked).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spark::constrain {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  void remove(uint8_t b) { bits[b >> 6] &= ~(uint64_t(1) << (b & 63)); }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
  bool operator==(const ByteSet&) const = default;
};

enum class ElemKind : uint8_t {
  END,          // closes an alternative
  BYTES,        // one byte from byte_sets[index]
  RULE,         // a call of rule `index`
  STRING_BODY,  // the inside of a JSON string: unescaped chars (valid UTF-8) and escapes;
                // matched by a small built-in automaton so masks can be taken in bulk;
                // index: its length bounds in string_bounds (0 = unbounded)
  COUNTED,      // a call of a rule whose strings are the inside of a JSON string (a format
                // or pattern), taken only where its length in characters lies within
                // bounds; index: into Grammar::counted
};

struct Elem {
  ElemKind kind = ElemKind::END;
  uint32_t index = 0;
};

// A string body's length in characters (code points, an escape counting one), as JSON
// Schema's minLength / maxLength count them.
struct StringBounds {
  uint32_t min = 0;
  uint32_t max = UINT32_MAX;
};

// A counted region: rule `rule`, whose strings are JSON string contents (escaped as they
// are written), matched only with min..max characters. The matcher keeps the count and the
// string automaton's state in the region's frame, and refuses a byte after which the rule
// cannot finish within the bounds (by the fewest / most characters each position still
// needs: Grammar::min_chars / max_chars).
struct Counted {
  uint32_t rule = 0;
  StringBounds bounds;
  // The most characters any state inside the region can still need to finish it: farther
  // than that (and a token) from maxLength, and past minLength, the count changes no mask.
  uint32_t max_need = 0;
};
inline constexpr uint32_t kUnboundedChars = 0xFFFFFFFFu;

// Limits on what one grammar may grow to; compile errors name the one that was hit.
inline constexpr size_t kMaxGrammarElems = 400'000;
inline constexpr size_t kMaxGrammarRules = 100'000;
// Counted repetitions (maxItems, maxLength, regex {n,m}) are expanded up to this count.
inline constexpr int64_t kMaxRepeat = 4096;

struct Grammar {
  std::vector<ByteSet> byte_sets;
  std::vector<StringBounds> string_bounds{StringBounds{}};  // [0]: unbounded
  std::vector<Elem> elems;                    // every alternative's elements, END-terminated
  std::vector<std::vector<uint32_t>> rules;   // rule -> start positions of its alternatives
  uint32_t root = 0;
  // Per position in elems: the fewest bytes that finish its alternative (min_length.h).
  std::vector<uint32_t> min_rest;
  std::vector<Counted> counted;
  // Per position: whether it lies in a rule a counted region calls (directly or not), and
  // there the fewest / most characters (kUnboundedChars: no limit) that finish its
  // alternative (an escape or a multi-byte character counts one).
  std::vector<uint8_t> in_region;
  std::vector<uint32_t> min_chars, max_chars;
  // Texts the grammar's notation writes as its own markers (Gemma 4's <|"|> around a
  // string), which a tokenizer may hold as added tokens. Added tokens are never allowed
  // inside a value (token_table.h) but these: the matcher allows such a token wherever the
  // grammar accepts its text, and takes it where that text is forced, as the model writes it.
  std::vector<std::string> markers;
  // The rule an element calls: RULE's index, or a counted region's rule.
  uint32_t called(const Elem& e) const { return e.kind == ElemKind::COUNTED ? counted[e.index].rule : e.index; }
  bool calls(const Elem& e) const { return e.kind == ElemKind::RULE || e.kind == ElemKind::COUNTED; }

  // Throws InputError when a rule derives no finite string or calls itself (directly or
  // through rules that may match nothing) before matching a byte.
  void validate() const;
};

// Builds grammars bottom-up. A "rule" is an id; sequences refer to rules and byte sets.
class GrammarBuilder {
 public:
  GrammarBuilder();
  uint32_t new_rule();  // a rule with no alternatives yet (for recursion)
  // Adds one alternative (a sequence of elements) to `rule`.
  void add_alt(uint32_t rule, const std::vector<Elem>& seq);
  uint32_t rule_of(const std::vector<std::vector<Elem>>& alts);

  Elem bytes(const ByteSet& set);
  Elem byte(uint8_t b);
  static Elem call(uint32_t rule) { return {ElemKind::RULE, rule}; }
  static Elem string_body() { return {ElemKind::STRING_BODY, 0}; }
  // A string body of min..max characters: one element, so its masks stay bulk ones.
  Elem string_body(uint32_t min, uint32_t max);
  // Rule `rule` (the inside of a JSON string) restricted to min..max characters.
  Elem counted(uint32_t rule, uint32_t min, uint32_t max);
  std::vector<Elem> literal(std::string_view text);
  uint32_t literal_rule(std::string_view text) { return rule_of({literal(text)}); }
  // Declares `text` one of the grammar's markers (Grammar::markers); once is enough.
  void add_marker(std::string_view text);
  uint32_t empty_rule() { return rule_of({{}}); }

  uint32_t optional(uint32_t rule) { return rule_of({{call(rule)}, {}}); }
  uint32_t star(uint32_t rule);                          // zero or more (rule must not match "")
  uint32_t plus(uint32_t rule);                          // one or more
  // Between min and max repetitions, each preceded by `separator` but the first (-1 = no
  // separator); max < 0 = unbounded.
  uint32_t repeat(uint32_t rule, int64_t min, int64_t max, int64_t separator_rule = -1);

  // The fewest and most characters (kUnboundedChars: no most) of the JSON string contents
  // a rule derives.
  std::pair<uint32_t, uint32_t> chars_of(uint32_t rule) const;
  Grammar finish(uint32_t root);
  size_t size() const { return g_.elems.size(); }
  const Grammar& grammar() const { return g_; }  // as built so far

 private:
  void check_limits() const;
  Grammar g_;
};

}  // namespace spark::constrain
