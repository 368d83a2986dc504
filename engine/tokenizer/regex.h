// regex.h — a PCRE2 (UTF + UCP, JIT when available) regex used by the Split pre-tokenizers,
// with match limits so a catastrophic pattern ends in an InputError instead of a hang.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace spark {

class Regex {
 public:
  // `pattern` uses the Oniguruma/Rust syntax found in tokenizer.json; the few classes whose
  // meaning differs in PCRE2 (\s, \w) are rewritten to match the reference. Throws
  // InputError when the pattern does not compile.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) byte ranges of the successive non-overlapping matches in `subject`
  // (valid UTF-8). An empty match right after the previous match is skipped, as Rust's
  // iterators do. Throws InputError when the match limit is exceeded.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return source_; }

 private:
  std::string source_;
  pcre2_real_code_8* code_ = nullptr;
};

// Escapes a literal string for use inside a pattern.
std::string regex_escape(std::string_view literal);

// Rewrites Oniguruma-only escapes into PCRE2 equivalents (exposed for tests).
std::string translate_oniguruma(const std::string& pattern);

}  // namespace spark
