// lexer.cpp — the template tokenizer. It follows jinja2 3.1's lexer rule by rule, since
// whitespace handling around tags decides whether a rendered prompt matches byte for byte.
#include "engine/template/jinja/lexer.h"

#include <cctype>

#include "engine/template/jinja/error.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {
namespace {

// jinja2 normalizes every newline form to "\n" and drops one trailing newline
// (keep_trailing_newline=False).
std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length in bytes of the Python-whitespace code point at s[i], or 0.
size_t space_at(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  size_t n = (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : (c >= 0xC0) ? 2 : 1;
  if (i + n > s.size()) return 0;
  std::u32string cps = utf8_decode(std::string_view(s).substr(i, n));
  return cps.size() == 1 && py_isspace(cps[0]) ? n : 0;
}

size_t skip_spaces(const std::string& s, size_t i) {
  while (i < s.size()) {
    size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

std::string rstrip_spaces(const std::string& text) {
  std::u32string cps = utf8_decode(text);
  size_t e = cps.size();
  while (e > 0 && py_isspace(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(0, e));
}

bool all_spaces(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // jinja2's `\s+` needs at least one character
  for (char32_t cp : utf8_decode(std::string_view(s).substr(from)))
    if (!py_isspace(cp)) return false;
  return true;
}

class Lexer {
 public:
  Lexer(const std::string& source, const LexerOptions& options)
      : src_(normalize_source(source)), opt_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(TokenType::TEXT, src_.substr(pos_));
        count_lines(pos_, src_.size());
        pos_ = src_.size();
        break;
      }
      char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(after + (sign ? 1 : 0), "raw") : std::string::npos;
      emit_text(src_.substr(pos_, tag - pos_), sign, kind != '{');
      count_lines(pos_, tag);
      pos_ = after + (sign ? 1 : 0);
      if (raw_end != std::string::npos) {
        count_lines(tag, raw_end);
        pos_ = raw_end;
        lex_raw_body();
      } else if (kind == '#') {
        lex_comment();
      } else {
        lex_tag(kind == '{');
      }
    }
    tokens_.push_back({TokenType::END_OF_INPUT, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw TemplateError("template syntax error, line " + std::to_string(line_) + ": " + msg, TemplateError::Kind::SYNTAX);
  }

  void emit(TokenType type, std::string value) { tokens_.push_back({type, std::move(value), line_}); }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i)
      if (src_[i] == '\n') ++line_;
  }

  size_t find_tag(size_t from) const {
    size_t i = from;
    while ((i = src_.find('{', i)) != std::string::npos) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
      ++i;
    }
    return std::string::npos;
  }

  // Text before a tag: `-` strips all whitespace before it; otherwise lstrip_blocks removes
  // the indentation of a block or comment tag that starts its line.
  void emit_text(std::string text, char sign, bool block_or_comment) {
    if (sign == '-') {
      text = rstrip_spaces(text);
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_spaces(text, l_pos)) text.resize(l_pos);
    }
    if (!text.empty()) emit(TokenType::TEXT, std::move(text));
  }

  // `\s*name\s*(-%}\s*|%})` after "{%" and its sign; returns the end or npos.
  size_t match_raw_begin(size_t at, const char* name) const {
    size_t i = skip_spaces(src_, at);
    std::string n = name;
    if (src_.compare(i, n.size(), n) != 0) return std::string::npos;
    i = skip_spaces(src_, i + n.size());
    if (src_.compare(i, 3, "-%}") == 0) return skip_spaces(src_, i + 3);
    if (src_.compare(i, 2, "%}") == 0) return i + 2;  // no trim_blocks after {% raw %}
    return std::string::npos;
  }

  // The block end: `+%}`, `-%}\s*` or `%}` plus one newline under trim_blocks.
  size_t match_block_end(size_t i) const {
    if (src_.compare(i, 3, "+%}") == 0) return i + 3;
    if (src_.compare(i, 3, "-%}") == 0) return skip_spaces(src_, i + 3);
    if (src_.compare(i, 2, "%}") == 0) {
      i += 2;
      if (opt_.trim_blocks && i < src_.size() && src_[i] == '\n') ++i;
      return i;
    }
    return std::string::npos;
  }

  void finish_match(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    count_lines(pos_, end);
    pos_ = end;
  }

  void lex_raw_body() {
    size_t search = pos_;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail("missing end of raw directive");
      size_t after = tag + 2;
      char sign = (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      size_t name_at = skip_spaces(src_, after + (sign ? 1 : 0));
      if (src_.compare(name_at, 6, "endraw") == 0) {
        size_t end = match_block_end(skip_spaces(src_, name_at + 6));
        if (end != std::string::npos) {
          emit_text(src_.substr(pos_, tag - pos_), sign, true);
          finish_match(end);
          return;
        }
      }
      search = tag + 2;
    }
  }

  void lex_comment() {
    size_t i = pos_;
    while (true) {
      size_t close = src_.find("#}", i);
      if (close == std::string::npos) fail("missing end of comment tag");
      // The lazy regex stops at the first `#}`; a `-` or `+` right before it is its modifier.
      if (close > pos_ && src_[close - 1] == '-') {
        finish_match(skip_spaces(src_, close + 2));
      } else if (close > pos_ && src_[close - 1] == '+') {
        finish_match(close + 2);
      } else {
        size_t end = close + 2;
        if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
        finish_match(end);
      }
      return;
    }
  }

  void lex_tag(bool variable) {
    emit(variable ? TokenType::VAR_BEGIN : TokenType::BLOCK_BEGIN, "");
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail(variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balance.empty()) {
        if (variable) {
          if (src_.compare(pos_, 3, "-}}") == 0) {
            emit(TokenType::VAR_END, "");
            finish_match(skip_spaces(src_, pos_ + 3));
            return;
          }
          if (src_.compare(pos_, 2, "}}") == 0) {
            emit(TokenType::VAR_END, "");
            finish_match(pos_ + 2);
            return;
          }
        } else {
          size_t end = match_block_end(pos_);
          if (end != std::string::npos) {
            emit(TokenType::BLOCK_END, "");
            finish_match(end);
            return;
          }
        }
      }
      size_t ws = skip_spaces(src_, pos_);
      if (ws != pos_) {
        finish_match(ws);
        continue;
      }
      lex_expression_token(balance);
    }
  }

  void lex_expression_token(std::vector<char>& balance) {
    char c = src_[pos_];
    unsigned char uc = static_cast<unsigned char>(c);
    if (std::isdigit(uc)) return lex_number();
    if (std::isalpha(uc) || c == '_' || uc >= 0x80) {
      size_t e = pos_;
      while (e < src_.size()) {
        unsigned char d = static_cast<unsigned char>(src_[e]);
        if (std::isalnum(d) || d == '_' || (d >= 0x80 && !space_at(src_, e))) ++e;
        else break;
      }
      emit(TokenType::NAME, src_.substr(pos_, e - pos_));
      finish_match(e);
      return;
    }
    if (c == '\'' || c == '"') return lex_string(c);
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(TokenType::OP, op);
        finish_match(pos_ + 2);
        return;
      }
    }
    if (std::string("+-/*%~[](){}><=.:|,;").find(c) == std::string::npos)
      fail(std::string("unexpected char '") + c + "'");
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(std::string("unexpected '") + c + "'");
      if (balance.back() != c) fail(std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    emit(TokenType::OP, std::string(1, c));
    finish_match(pos_ + 1);
  }

  // Digits with optional `_` separators; returns the end or `at` when none.
  size_t scan_digits(size_t at) const {
    size_t i = at;
    while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) ++i;
    }
    return i;
  }

  void lex_number() {
    size_t start = pos_;
    auto strip = [](std::string s) {
      std::string out;
      for (char ch : s)
        if (ch != '_') out += ch;
      return out;
    };
    if (src_[start] == '0' && start + 1 < src_.size() && std::string("xXoObB").find(src_[start + 1]) != std::string::npos) {
      int base = (src_[start + 1] == 'x' || src_[start + 1] == 'X') ? 16 : (src_[start + 1] == 'o' || src_[start + 1] == 'O') ? 8 : 2;
      size_t i = start + 2;
      while (i < src_.size() && (std::isxdigit(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) ++i;
      std::string digits = strip(src_.substr(start + 2, i - start - 2));
      if (digits.empty()) fail("invalid number literal");
      unsigned long long v = 0;
      for (char ch : digits) {
        int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0' : (std::tolower(static_cast<unsigned char>(ch)) - 'a' + 10);
        if (d >= base) fail("invalid number literal");
        if (v > (~0ULL >> 5)) fail("integer literal too large");
        v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
      }
      if (v > static_cast<unsigned long long>(INT64_MAX)) fail("integer literal too large");
      emit(TokenType::INTEGER, std::to_string(v));
      finish_match(i);
      return;
    }
    size_t i = scan_digits(start);
    bool is_float = false;
    size_t j = i;
    if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      j = scan_digits(j + 1);
      is_float = true;
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      size_t e = scan_digits(k);
      if (e > k) {
        j = e;
        is_float = true;
      }
    }
    if (!is_float) j = i;
    emit(is_float ? TokenType::FLOAT : TokenType::INTEGER, strip(src_.substr(start, j - start)));
    finish_match(j);
  }

  void lex_string(char quote) {
    std::string out;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) fail("unexpected end of string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unexpected end of string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) fail("truncated \\" + std::string(1, e) + " escape in string literal");
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated \\" + std::string(1, e) + " escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
          }
          if (cp > 0x10FFFF) fail("illegal Unicode character in string literal");
          utf8_append(out, cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) cp = cp * 8 + static_cast<char32_t>(src_[i++] - '0');
            utf8_append(out, cp);
          } else {
            out += '\\';  // unknown escapes stay as written, as in Python
            out += e;
          }
      }
    }
    emit(TokenType::STRING, std::move(out));
    finish_match(i + 1);
  }

  std::string src_;
  LexerOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace spark::jinja
