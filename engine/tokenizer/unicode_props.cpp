// unicode_props.cpp — character classes from utf8proc's Unicode tables.
#include "engine/tokenizer/unicode_props.h"

#include <utf8proc.h>

namespace spark {

namespace {
utf8proc_category_t cat(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }
}  // namespace

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_mark(char32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool is_nonspacing_mark(char32_t cp) { return cat(cp) == UTF8PROC_CATEGORY_MN; }

bool is_control(char32_t cp) { return cat(cp) == UTF8PROC_CATEGORY_CC; }

bool is_other(char32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
         c == UTF8PROC_CATEGORY_CO;
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z');
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_PC || c == UTF8PROC_CATEGORY_PD || c == UTF8PROC_CATEGORY_PS ||
         c == UTF8PROC_CATEGORY_PE || c == UTF8PROC_CATEGORY_PI || c == UTF8PROC_CATEGORY_PF ||
         c == UTF8PROC_CATEGORY_PO;
}

bool is_punctuation_char(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
  return is_punctuation(cp);
}

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace spark
