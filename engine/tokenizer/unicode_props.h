// unicode_props.h — the character classes the pre-tokenizers and normalizers test, with the
// meanings Rust's char methods give them (White_Space, general categories).
#pragma once

namespace spark {

bool is_white_space(char32_t cp);   // Unicode White_Space (Rust char::is_whitespace)
bool is_mark(char32_t cp);          // general category M*
bool is_nonspacing_mark(char32_t cp);  // general category Mn
bool is_control(char32_t cp);       // general category Cc
bool is_other(char32_t cp);         // Cc, Cf, Cs, Co (unassigned code points are not included)
bool is_numeric(char32_t cp);       // general categories Nd, Nl, No (Rust char::is_numeric)
bool is_alphanumeric(char32_t cp);  // Alphabetic or numeric (approximated by L*, Nl, N*)
bool is_punctuation(char32_t cp);   // general category P*
bool is_punctuation_char(char32_t cp);  // ASCII punctuation or P* (the Punctuation pre-tokenizer)
bool is_cjk_ideograph(char32_t cp); // the CJK blocks BERT pads with spaces

}  // namespace spark
