// regex.cpp — PCRE2 wrapper: compile with JIT, per-thread match data, bounded matching.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/regex.h"

#include <pcre2.h>

#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

namespace {

// Bounds on one match attempt. Real tokenizer patterns need a few steps per byte; these
// leave room for long inputs while stopping exponential backtracking in well under a second.
constexpr uint32_t MATCH_LIMIT = 20'000'000;
constexpr uint32_t DEPTH_LIMIT = 100'000;
constexpr size_t JIT_STACK_MAX = 8u << 20;

// Per-thread scratch: the compiled code is shared and immutable, match data is not.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context, MATCH_LIMIT);
    pcre2_set_depth_limit(context, DEPTH_LIMIT);
    jit_stack = pcre2_jit_stack_create(64 * 1024, JIT_STACK_MAX, nullptr);
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// Oniguruma's \s is Unicode White_Space, which includes U+0085; PCRE2's \s under UCP does not.
// Oniguruma's \w is the Unicode word property (letters, marks, decimal digits, connectors).
constexpr const char* SPACE_SET =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* WORD_SET = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}";

}  // namespace

// Inside a character class \S and \W keep PCRE2's meaning: a negated set cannot nest there.
std::string translate_oniguruma(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += class_depth ? std::string(SPACE_SET) : "[" + std::string(SPACE_SET) + "]";
      } else if (e == 'S' && !class_depth) {
        out += "[^" + std::string(SPACE_SET) + "]";
      } else if (e == 'w') {
        out += class_depth ? std::string(WORD_SET) : "[" + std::string(WORD_SET) + "]";
      } else if (e == 'W' && !class_depth) {
        out += "[^" + std::string(WORD_SET) + "]";
      } else if (e == 'h') {
        // Oniguruma: \h is a hexadecimal digit (PCRE2: horizontal space).
        out += class_depth ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') { out += '^'; ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out += "\\]"; ++i; }
      continue;
    }
    if (c == ']' && class_depth) --class_depth;
    out += c;
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ \t\n\r").find(c) != std::string_view::npos) {
      if (c == '\t') { out += "\\t"; continue; }
      if (c == '\n') { out += "\\n"; continue; }
      if (c == '\r') { out += "\\r"; continue; }
      out += '\\';
    }
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern) : source_(pattern) {
  std::string translated = translate_oniguruma(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw InputError("tokenizer regex /" + pattern + "/ does not compile at offset " +
                     std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: when unavailable the interpreter runs with the same limits.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  MatchScratch& s = scratch();
  auto subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  size_t last_match_end = SIZE_MAX;
  while (pos <= subject.size()) {
    int rc = pcre2_match(code_, subj, subject.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
          rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
        throw InputError("tokenizer regex /" + source_ +
                         "/ exceeded its match limit (catastrophic backtracking) on an input of " +
                         std::to_string(subject.size()) + " bytes");
      }
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw InputError("tokenizer regex /" + source_ + "/ failed: " + reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    size_t start = ov[0], end = ov[1];
    if (start == end && end == last_match_end) {
      // An empty match right after the previous one: step over one character and search
      // again, as Rust's match iterators do.
      if (pos >= subject.size()) break;
      pos += utf8::seq_len(static_cast<unsigned char>(subject[pos]));
      continue;
    }
    out.emplace_back(start, end);
    last_match_end = end;
    pos = end;
  }
}

}  // namespace spark
