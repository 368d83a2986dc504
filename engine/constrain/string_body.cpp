// string_body.cpp — the automaton for the inside of a JSON string, over bytes: unescaped
// characters must be well-formed UTF-8 (no surrogates, no overlongs) other than '"', '\'
// and the controls U+0000..U+001F and U+007F; escapes are \" \\ \b \f \n \r \t, and \u only
// for the controls (\u0000..\u001F, \u007F): every other character has exactly one
// spelling, as llguidance's JSON strings do. State 0 is a character boundary (the string
// may close there).
#include <array>
#include <string_view>

#include "engine/constrain/token_table.h"

namespace spark::constrain {
namespace {

enum : uint8_t {
  BOUNDARY = 0,
  ESCAPE = 1,       // after '\'
  U_0 = 2,          // after \u: '0'
  U_00 = 3,         // after \u0: '0'
  U_000 = 4,        // after \u00: '0' or '1' (then one hex digit), or '7' (then F)
  U_HEX = 5,        // after \u000 / \u001: one hex digit
  U_7 = 13,         // after \u007: 'F' or 'f'
  CONT1 = 6,        // one continuation byte to go
  CONT2 = 7,
  CONT3 = 8,
  AFTER_E0 = 9,     // E0: next A0..BF (no overlongs)
  AFTER_ED = 10,    // ED: next 80..9F (no surrogates)
  AFTER_F0 = 11,    // F0: next 90..BF
  AFTER_F4 = 12,    // F4: next 80..8F (nothing past U+10FFFF)
};

using Table = std::array<std::array<uint8_t, 256>, kStringStates>;

Table make_table() {
  Table t;
  for (auto& row : t) row.fill(kStringDead);
  auto set = [&](uint8_t from, int lo, int hi, uint8_t to) {
    for (int b = lo; b <= hi; ++b) t[from][b] = to;
  };
  set(BOUNDARY, 0x20, 0x7E, BOUNDARY);
  t[BOUNDARY]['"'] = kStringDead;
  t[BOUNDARY]['\\'] = ESCAPE;
  set(BOUNDARY, 0xC2, 0xDF, CONT1);
  set(BOUNDARY, 0xE0, 0xE0, AFTER_E0);
  set(BOUNDARY, 0xE1, 0xEC, CONT2);
  set(BOUNDARY, 0xED, 0xED, AFTER_ED);
  set(BOUNDARY, 0xEE, 0xEF, CONT2);
  set(BOUNDARY, 0xF0, 0xF0, AFTER_F0);
  set(BOUNDARY, 0xF1, 0xF3, CONT3);
  set(BOUNDARY, 0xF4, 0xF4, AFTER_F4);
  for (char c : std::string_view("\"\\bfnrt")) t[ESCAPE][uint8_t(c)] = BOUNDARY;
  t[ESCAPE]['u'] = U_0;
  t[U_0]['0'] = U_00;
  t[U_00]['0'] = U_000;
  set(U_000, '0', '1', U_HEX);
  t[U_000]['7'] = U_7;
  set(U_HEX, '0', '9', BOUNDARY);
  set(U_HEX, 'a', 'f', BOUNDARY);
  set(U_HEX, 'A', 'F', BOUNDARY);
  t[U_7]['F'] = t[U_7]['f'] = BOUNDARY;
  set(CONT1, 0x80, 0xBF, BOUNDARY);
  set(CONT2, 0x80, 0xBF, CONT1);
  set(CONT3, 0x80, 0xBF, CONT2);
  set(AFTER_E0, 0xA0, 0xBF, CONT1);
  set(AFTER_ED, 0x80, 0x9F, CONT1);
  set(AFTER_F0, 0x90, 0xBF, CONT2);
  set(AFTER_F4, 0x80, 0x8F, CONT2);
  return t;
}

const Table kTable = make_table();

}  // namespace

uint8_t string_body_step(uint8_t state, uint8_t byte) { return kTable[state][byte]; }

}  // namespace spark::constrain
