// regex.cpp — a recursive-descent regex parser that emits grammar rules.
#include "engine/constrain/regex.h"

#include <optional>
#include <string>

#include "engine/constrain/string_formats.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

struct CharClass {
  ByteSet ascii;
  bool non_ascii = false;  // also every multi-byte UTF-8 character
};

struct Piece {
  uint32_t rule;
  bool nullable;
};

class RegexCompiler {
 public:
  RegexCompiler(GrammarBuilder& b, std::string_view p, RegexContext c) : b_(b), p_(p), context_(c) {}

  uint32_t compile() {
    if (p_.size() > kMaxRegexLength) fail("the pattern is longer than " + std::to_string(kMaxRegexLength) + " bytes");
    if (!p_.empty() && p_[0] == '^') ++i_;
    if (p_.size() > i_ && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) end_ = p_.size() - 1;
    else end_ = p_.size();
    Piece whole = alternation(0);
    if (i_ != end_) fail("unbalanced ')' at offset " + std::to_string(i_));
    return whole.rule;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw InputError("regex '" + std::string(p_.substr(0, 80)) + "': " + why); }

  bool more() const { return i_ < end_; }
  char peek() const { return p_[i_]; }

  Piece alternation(int depth) {
    if (depth > kMaxRegexNesting) fail("groups nested deeper than " + std::to_string(kMaxRegexNesting));
    const uint32_t r = b_.new_rule();
    bool nullable = false;
    for (;;) {
      Piece s = sequence(depth);
      b_.add_alt(r, {GrammarBuilder::call(s.rule)});
      nullable = nullable || s.nullable;
      if (more() && peek() == '|') {
        ++i_;
        continue;
      }
      return {r, nullable};
    }
  }

  Piece sequence(int depth) {
    std::vector<Elem> seq;
    bool nullable = true;
    while (more() && peek() != '|' && peek() != ')') {
      Piece a = atom(depth);
      a = quantified(a);
      seq.push_back(GrammarBuilder::call(a.rule));
      nullable = nullable && a.nullable;
    }
    return {b_.rule_of({seq}), nullable};
  }

  Piece quantified(Piece a) {
    if (!more()) return a;
    int64_t min = -2, max = -1;
    const char c = peek();
    if (c == '*') min = 0, max = -1, ++i_;
    else if (c == '+') min = 1, max = -1, ++i_;
    else if (c == '?') min = 0, max = 1, ++i_;
    else if (c == '{' && braces(min, max)) {
    } else return a;
    if (more() && peek() == '?') ++i_;  // lazy: the same strings
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?')) fail("a quantifier cannot follow a quantifier");
    if (a.nullable && max != 1 && max != 0) fail("a repeated expression that can match nothing is not supported");
    if (max > kMaxRepeat || min > kMaxRepeat) fail("repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
    return {b_.repeat(a.rule, min, max), min == 0 || a.nullable};
  }

  // {n}, {n,}, {n,m}; false (and nothing consumed) when this '{' is a literal.
  bool braces(int64_t& min, int64_t& max) {
    size_t j = i_ + 1;
    auto number = [&](int64_t& out) {
      size_t start = j;
      out = 0;
      while (j < end_ && p_[j] >= '0' && p_[j] <= '9' && j - start < 7) out = out * 10 + (p_[j++] - '0');
      return j > start;
    };
    if (!number(min)) return false;
    max = min;
    if (j < end_ && p_[j] == ',') {
      ++j;
      if (!number(max)) max = -1;
    }
    if (j >= end_ || p_[j] != '}') return false;
    if (max >= 0 && max < min) fail("a repetition's maximum is below its minimum");
    i_ = j + 1;
    return true;
  }

  Piece atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (p_.substr(i_, 2) == "?:") i_ += 2;
      else if (more() && peek() == '?') fail("lookaround and named groups are not supported");
      Piece inner = alternation(depth + 1);
      if (!more() || peek() != ')') fail("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return {class_rule(bracket()), false};
    if (c == '.') {
      ++i_;
      CharClass any;
      any.ascii.add_range(0, 0x7F);
      any.ascii.remove('\n');
      any.non_ascii = true;
      return {class_rule(any), false};
    }
    if (c == '\\') {
      ++i_;
      if (!more()) fail("a trailing '\\'");
      if (auto cls = class_escape(peek())) {
        ++i_;
        return {class_rule(*cls), false};
      }
      return {literal_rule(escaped_char()), false};
    }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat at offset " + std::to_string(i_));
    if (c == '^' || c == '$') fail("anchors inside the pattern are not supported");
    // A literal character, multi-byte UTF-8 included.
    size_t len = 1;
    const auto lead = uint8_t(c);
    if (lead >= 0xF0) len = 4;
    else if (lead >= 0xE0) len = 3;
    else if (lead >= 0xC0) len = 2;
    if (i_ + len > end_) fail("ill-formed UTF-8");
    std::string text(p_.substr(i_, len));
    i_ += len;
    return {literal_rule(text), false};
  }

  // \d \w \s \D \W \S as classes; nullopt for other escapes.
  static std::optional<CharClass> class_escape(char c) {
    CharClass k;
    switch (c) {
      case 'd': case 'D': k.ascii.add_range('0', '9'); break;
      case 'w': case 'W': k.ascii.add_range('0', '9'), k.ascii.add_range('a', 'z'), k.ascii.add_range('A', 'Z'), k.ascii.add('_'); break;
      case 's': case 'S': for (char s : std::string_view(" \t\n\r\f\v")) k.ascii.add(uint8_t(s)); break;
      default: return std::nullopt;
    }
    if (c == 'D' || c == 'W' || c == 'S') {
      for (int w = 0; w < 2; ++w) k.ascii.bits[w] = ~k.ascii.bits[w];
      k.non_ascii = true;
    }
    return k;
  }

  // After '\': the character it stands for (one byte, or UTF-8 for \uXXXX).
  std::string escaped_char() {
    const char c = p_[i_++];
    switch (c) {
      case 'n': return "\n";
      case 't': return "\t";
      case 'r': return "\r";
      case 'f': return "\f";
      case 'v': return "\v";
      case '0': return std::string(1, '\0');
      case 'u': {
        if (i_ + 4 > end_) fail("\\u needs four hex digits");
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = p_[i_++];
          if (!std::isxdigit(uint8_t(h))) fail("\\u needs four hex digits");
          cp = cp * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        std::string out;
        if (cp < 0x80) out += char(cp);
        else if (cp < 0x800) out += char(0xC0 | cp >> 6), out += char(0x80 | (cp & 63));
        else out += char(0xE0 | cp >> 12), out += char(0x80 | ((cp >> 6) & 63)), out += char(0x80 | (cp & 63));
        return out;
      }
      case 'b': case 'B': fail("word boundaries are not supported");
      default:
        if (std::isalnum(uint8_t(c))) fail(std::string("the escape \\") + c + " is not supported");
        return std::string(1, c);
    }
  }

  CharClass bracket() {
    ++i_;  // '['
    CharClass k;
    bool negate = more() && peek() == '^';
    if (negate) ++i_;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      int lo;
      if (peek() == '\\') {
        ++i_;
        if (!more()) fail("a trailing '\\'");
        if (auto cls = class_escape(peek())) {
          ++i_;
          for (int w = 0; w < 4; ++w) k.ascii.bits[w] |= cls->ascii.bits[w];
          k.non_ascii = k.non_ascii || cls->non_ascii;
          continue;
        }
        std::string ch = escaped_char();
        if (ch.size() != 1) fail("non-ASCII characters in a class are not supported");
        lo = uint8_t(ch[0]);
      } else {
        lo = uint8_t(p_[i_++]);
      }
      if (lo >= 0x80) fail("non-ASCII characters in a class are not supported");
      int hi = lo;
      if (i_ + 1 < end_ && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          std::string ch = escaped_char();
          hi = uint8_t(ch[0]);
        } else {
          hi = uint8_t(p_[i_++]);
        }
        if (hi >= 0x80) fail("non-ASCII characters in a class are not supported");
        if (hi < lo) fail("a class range is reversed");
      }
      k.ascii.add_range(uint8_t(lo), uint8_t(hi));
    }
    if (!more()) fail("missing ']'");
    ++i_;
    if (negate) {
      for (int w = 0; w < 2; ++w) k.ascii.bits[w] = ~k.ascii.bits[w];
      k.non_ascii = !k.non_ascii;
    }
    k.ascii.bits[2] = k.ascii.bits[3] = 0;
    return k;
  }

  uint32_t class_rule(CharClass k) {
    const uint32_t r = b_.new_rule();
    if (context_ == RegexContext::JSON_STRING) {
      for (int c = 0; c < 0x20; ++c) k.ascii.remove(uint8_t(c));
      k.ascii.remove('"'), k.ascii.remove('\\'), k.ascii.remove(0x7F);
    }
    if (!k.ascii.empty()) b_.add_alt(r, {b_.bytes(k.ascii)});
    if (k.non_ascii) b_.add_alt(r, {GrammarBuilder::call(add_utf8_multibyte_char(b_))});
    return r;
  }

  uint32_t literal_rule(const std::string& text) {
    if (context_ != RegexContext::JSON_STRING) return b_.literal_rule(text);
    std::string escaped;
    for (char c : text) {
      if (c == '"' || c == '\\') escaped += '\\', escaped += c;
      else if (c == '\n') escaped += "\\n";
      else if (c == '\t') escaped += "\\t";
      else if (c == '\r') escaped += "\\r";
      else if (uint8_t(c) < 0x20 || c == 0x7F) fail("control characters in a string pattern are not supported");
      else escaped += c;
    }
    return b_.literal_rule(escaped);
  }

  GrammarBuilder& b_;
  std::string_view p_;
  RegexContext context_;
  size_t i_ = 0, end_ = 0;
};

}  // namespace

uint32_t add_regex(GrammarBuilder& b, std::string_view pattern, RegexContext context) {
  return RegexCompiler(b, pattern, context).compile();
}

}  // namespace spark::constrain
