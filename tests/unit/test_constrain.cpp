// test_constrain.cpp — the constraint engine against independent oracles: integer ranges
// against arithmetic, regexes against std::regex, trie-walk masks against checking every
// token one by one, bounded string bodies against their expanded grammar, and the limits
// that refuse hostile schemas.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <functional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/regex.h"
#include "engine/constrain/string_formats.h"
#include "engine/util/check.h"

using namespace spark;
using namespace spark::constrain;

namespace {

// A vocabulary of the 256 single bytes (plus extra tokens), so any text can be fed.
std::shared_ptr<const TokenTable> byte_table(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  bytes.insert(bytes.end(), extra.begin(), extra.end());
  return std::make_shared<const TokenTable>(bytes);
}

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::JSON_SCHEMA;
  spec.schema = schema;
  return std::make_shared<const Grammar>(build_grammar(spec));
}

// Why a schema is refused ("" when it compiles).
std::string refused(const std::string& schema) {
  try {
    schema_grammar(schema);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTable>& t, const std::string& text) {
  Matcher m(g, t);
  return m.advance_bytes(text) && m.accepting();
}

}  // namespace

TEST_CASE("integer ranges accept exactly the canonical integers inside the bounds") {
  auto table = byte_table();
  const std::pair<int, int> bounds[] = {{-40, 60}, {1, 50}, {0, 150}, {-7, -3}, {95, 205}, {0, 0}, {-120, 9}};
  for (auto [lo, hi] : bounds) {
    CAPTURE(lo);
    CAPTURE(hi);
    auto g = schema_grammar(R"({"type":"integer","minimum":)" + std::to_string(lo) + R"(,"maximum":)" + std::to_string(hi) + "}");
    for (int v = -300; v <= 300; ++v) {
      CAPTURE(v);
      CHECK(accepts(g, table, std::to_string(v)) == (v >= lo && v <= hi));
    }
    CHECK_FALSE(accepts(g, table, "007"));
    CHECK(accepts(g, table, "-0") == (lo <= 0 && hi >= 0 && lo < 0));
  }
  auto open_top = schema_grammar(R"({"type":"integer","exclusiveMinimum":17})");
  for (int v = -50; v <= 5000; v += 7) CHECK(accepts(open_top, table, std::to_string(v)) == (v > 17));
}

TEST_CASE("bounded numbers stay inside their bounds") {
  auto table = byte_table();
  auto g = schema_grammar(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":3})");
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    const int whole = int(rng() % 9) - 4;
    std::string text = std::to_string(whole);
    if (rng() % 2) text += "." + std::to_string(rng() % 100);
    if (!accepts(g, table, text)) continue;
    ++accepted;
    const double v = std::stod(text);
    CAPTURE(text);
    CHECK((v >= -2.5 && v < 3));
  }
  CHECK(accepted > 300);
}

TEST_CASE("regexes match what std::regex matches") {
  auto table = byte_table();
  const char* patterns[] = {"a(b|c)*d", "[a-c]{2,4}x?", "(ab|a)(bc|c)", "[^b]+b", R"(\d{3}-\d{2})", "(a|b)*abb",
                            "x(y?z){1,3}", R"([\w]+\.[a-c]+)", "(a+)+b", "a.c"};
  std::mt19937 rng(19);
  const std::string alphabet = "abcdxyz01-._";
  for (const char* p : patterns) {
    CAPTURE(p);
    GrammarBuilder b;
    auto g = std::make_shared<const Grammar>([&] {
      uint32_t root = add_regex(b, p, RegexContext::TEXT);
      return b.finish(root);
    }());
    const std::regex re(p, std::regex::ECMAScript);
    int matched = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const size_t len = rng() % 9;
      for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      CAPTURE(s);
      const bool want = std::regex_match(s, re);
      matched += want;
      CHECK(accepts(g, table, s) == want);
    }
  }
}

TEST_CASE("masks from the trie walk equal checking every token alone") {
  // Tokens that cross structure: quotes, escapes, partial UTF-8, keys, digits.
  std::vector<std::string> extra = {"\"", "\":\"", "\",\"", "{\"", "\"}", "ab", "\\n", "\\u00", "\\\"x", "é", "\xC3",
                                    "\xA9\"", "12", "-3", ".5", "true", "null", "\"name\"", "name", "\":", "],", "[{",
                                    "}]", " ", "\"a\\", "\\/", "\x7F", "\xED\xA0\x80", "\"age\":4"};
  auto table = byte_table(extra);
  auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string","maxLength":3}},"kind":{"enum":["a","b\"c"]}},
      "required":["name"],"additionalProperties":false})");
  const std::string doc = R"({"name":"é\"x\n\u001f","age":-12,"tags":["ab","é"],"kind":"b\"c"})";
  Matcher m(g, table);
  std::vector<uint64_t> mask;
  for (size_t i = 0; i <= doc.size(); ++i) {
    CAPTURE(doc.substr(0, i));
    m.fill_mask(mask);
    for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t) {
      Matcher alone = m;
      const bool walk = (mask[size_t(t) / 64] >> (t % 64)) & 1;
      CAPTURE(table->bytes(t));
      CHECK(walk == alone.advance(t));
    }
    if (i < doc.size()) REQUIRE(m.advance(uint8_t(doc[i])));
  }
  CHECK(m.finished());
}

TEST_CASE("hostile and unsupported schemas are refused with the reason") {
  CHECK(refused(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("$ref") != std::string::npos);
  CHECK(refused(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})")
            .find("no value") != std::string::npos);
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"({"type":"array","items":)";
  deep += "{}" + std::string(200, '}');
  CHECK(refused(deep).find("deeper") != std::string::npos);
  CHECK(refused(R"({"type":"object","patternProperties":{}})").find("patternProperties") != std::string::npos);
  CHECK(refused(R"({"type":"string","format":"hostname"})").find("hostname") != std::string::npos);
  CHECK(refused(R"({"type":"string","pattern":"(a"})").find("')'") != std::string::npos);
  CHECK(refused(R"({"$ref":"http://example.com/s.json"})").find("local") != std::string::npos);
  nlohmann::json big = {{"enum", nlohmann::json::array()}};
  for (int i = 0; i < 100000; ++i) big["enum"].push_back("value-" + std::to_string(i));
  CHECK(refused(big.dump()).find("too large") != std::string::npos);
  // A recursive schema with a base case is fine.
  CHECK(refused(R"({"$defs":{"n":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"})")
            .empty());
}

TEST_CASE("the fewest bytes that complete a value, counted by hand") {
  auto table = byte_table();
  auto object = schema_grammar(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],
      "additionalProperties":false})");
  auto string3 = schema_grammar(R"({"type":"string","minLength":3})");
  auto any_string = schema_grammar(R"({"type":"string"})");
  struct Case {
    std::shared_ptr<const Grammar> g;
    std::string prefix;
    uint32_t bytes;
  };
  for (const Case& c : std::vector<Case>{{object, "", 7},          // {"a":0}
                                         {object, "{\"a\":", 2},   // 0}
                                         {object, "{\"a\":-", 2},  // 1}
                                         {object, "{\"a\":12", 1}, // }
                                         {object, "{\"a\":12}", 0},
                                         {string3, "", 5},              // "xxx"
                                         {string3, "\"\xC3\xA9", 3},    // xx"
                                         {string3, "\"\xC3", 4},        // \xA9 x x "
                                         {any_string, "\"ab\\", 2},     // n"
                                         {any_string, "\"\\u00", 3}}) { // 1f"
    CAPTURE(c.prefix);
    Matcher m(c.g, table);
    REQUIRE(m.advance_bytes(c.prefix));
    CHECK(m.min_bytes_to_finish() == c.bytes);
  }
}

TEST_CASE("a token budget closes the value: random walks end complete, masks equal checking every token") {
  std::vector<std::string> extra = {"\"", "\":\"", "\",\"", "{\"", "\"}", "ab", "abcdefgh", "\\n", "\\u00", "é", "\xC3",
                                    "12", "-3", "999999", "true", "null", "[{", "}]", "\"name\":\"", "\"tags\":[\""};
  auto table = byte_table(extra);
  auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string"},
      "tags":{"type":"array","items":{"type":"string"},"minItems":1},"n":{"type":"integer"}},
      "required":["name","tags","n"],"additionalProperties":false})");
  const uint32_t start_bytes = Matcher(g, table).min_bytes_to_finish();
  REQUIRE(start_bytes == std::string(R"({"name":"","tags":[""],"n":0})").size());
  std::mt19937 rng(7);
  std::vector<uint64_t> mask;
  for (int walk = 0; walk < 60; ++walk) {
    const int budget = int(start_bytes) + walk % 20;
    Matcher m(g, table);
    std::string text;
    for (int left = budget; left > 0; --left) {
      m.fill_mask(mask, uint32_t(left - 1));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
        if ((mask[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
      if (walk < 3) {  // the filtered mask against each token alone
        for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t) {
          Matcher alone = m;
          const bool ok = alone.advance(t) && alone.min_bytes_to_finish() <= uint32_t(left - 1);
          CAPTURE(text);
          CAPTURE(table->bytes(t));
          CHECK(ok == ((mask[size_t(t) / 64] >> (t % 64)) & 1));
        }
      }
      if (allowed.empty()) break;
      // Favour tokens that keep strings open (the longest ones), the worst case for a budget.
      std::sort(allowed.begin(), allowed.end(),
                [&](int32_t a, int32_t b) { return table->bytes(a).size() > table->bytes(b).size(); });
      const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, std::min<size_t>(allowed.size(), 8) - 1)(rng)];
      text += table->bytes(pick);
      REQUIRE(m.advance(pick));
    }
    CAPTURE(budget);
    CAPTURE(text);
    CHECK(m.accepting());
    CHECK(nlohmann::json::parse(text).is_object());
  }
}

TEST_CASE("a bounded string body matches the same strings as its characters repeated, token by token") {
  // The expanded form (one grammar rule per character, as minLength / maxLength compiled
  // before bounded bodies) is the reference; tokens cross characters, escapes and quotes.
  std::vector<std::string> extra = {"ab", "abc", "abcdefgh", "\\n", "\\u00", "\\u001f", "é", "éé", "\xC3", "\xA9",
                                    "\xA9z", "\xE4\xB8", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\"", "a\"", "ab\"", "\\\"x",
                                    "x\\", "\",\"", "\"]", "\"}"};
  auto table = byte_table(extra);
  std::mt19937 rng(11);
  std::vector<uint64_t> mask, ref_mask;
  for (auto [min, max] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 0}, {0, 1}, {2, 3}, {1, 5}, {4, UINT32_MAX}, {0, 12}}) {
    CAPTURE(min);
    CAPTURE(max);
    GrammarBuilder nb, eb;
    const uint32_t bounded = nb.rule_of({{nb.byte('"'), nb.string_body(min, max), nb.byte('"')}});
    const int64_t emax = max == UINT32_MAX ? -1 : int64_t(max);
    const uint32_t expanded =
        eb.rule_of({{eb.byte('"'), GrammarBuilder::call(eb.repeat(add_json_string_char(eb), min, emax)), eb.byte('"')}});
    auto g = std::make_shared<const Grammar>(nb.finish(bounded));
    auto ref = std::make_shared<const Grammar>(eb.finish(expanded));
    for (int walk = 0; walk < 40; ++walk) {
      Matcher m(g, table), r(ref, table);
      std::string text;
      for (int step = 0; step < 24; ++step) {
        CAPTURE(text);
        const uint32_t budget = walk % 2 ? uint32_t(30 - step) : Matcher::kNoLimit;
        m.fill_mask(mask, budget);
        r.fill_mask(ref_mask, budget);
        REQUIRE(mask == ref_mask);
        CHECK(m.accepting() == r.accepting());
        CHECK(m.min_bytes_to_finish() == r.min_bytes_to_finish());
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
          if ((mask[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
        if (allowed.empty()) break;
        const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        text += table->bytes(pick);
        REQUIRE(m.advance(pick));
        REQUIRE(r.advance(pick));
      }
    }
  }
}

TEST_CASE("format date accepts exactly the calendar's dates") {
  // The oracle: std::chrono's calendar (leap years, month lengths); year 0000 is refused as
  // Python's date.fromisoformat refuses it.
  auto table = byte_table();
  auto g = schema_grammar(R"({"type":"string","format":"date"})");
  char text[32];
  for (int y : {0, 1, 4, 100, 400, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9996, 9999})
    for (int m = 0; m <= 13; ++m)
      for (int d = 0; d <= 32; ++d) {
        std::snprintf(text, sizeof text, "\"%04d-%02d-%02d\"", y, m, d);
        CAPTURE(text);
        const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{unsigned(m)}, std::chrono::day{unsigned(d)}};
        CHECK(accepts(g, table, text) == (y > 0 && ymd.ok()));
      }
}

namespace {

// A JSON string's contents (as written between the quotes) decoded: its characters as
// JSON Schema counts them (code points), by nlohmann's parser, not the engine's automaton.
size_t json_chars(const std::string& body) {
  const std::string s = nlohmann::json::parse("\"" + body + "\"").get<std::string>();
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string json_escape(const std::string& s) { return nlohmann::json(s).dump().substr(1); }  // with the closing quote

// A random walk over the bytes a grammar allows, under a budget of `max_bytes` so that it
// ends complete, stopping where it may with probability 1/stop_one_in ("" if it did not finish).
std::string random_walk(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTable>& table, std::mt19937& rng,
                        uint32_t max_bytes, unsigned stop_one_in) {
  Matcher m(g, table);
  std::vector<uint64_t> mask;
  std::string text;
  for (uint32_t step = 0; step < max_bytes; ++step) {
    m.fill_mask(mask, max_bytes - 1 - step);  // the bytes left after this one
    std::vector<int32_t> allowed;
    for (int b = 0; b < 256; ++b)
      if ((mask[size_t(b) / 64] >> (b % 64)) & 1) allowed.push_back(b);
    if (allowed.empty() || (m.accepting() && rng() % stop_one_in == 0)) break;
    const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    REQUIRE(m.advance(pick));
    text += char(pick);
  }
  return m.accepting() ? text : std::string();
}

}  // namespace

TEST_CASE("a pattern under minLength / maxLength: exactly the prefixes of valid strings, token by token") {
  // The oracle: every string over a small alphabet (escapes and a 2-byte character among
  // it) up to maxLength, kept when std::regex matches it and its length in code points lies
  // in the bounds; a byte is allowed exactly when the text stays a prefix of one of them.
  const std::vector<std::string> alphabet = {"a", "b", "-", "\n", "\xC3\xA9"};
  auto table = byte_table();
  const std::string allowed_bytes = std::string("ab-\\n\"") + "\xC3\xA9";
  std::mt19937 rng(5);
  struct Case {
    std::string pattern, std_regex;
    bool anchored;
    uint32_t min, max;
  };
  for (const Case& c : std::vector<Case>{{"^a(b|\xC3\xA9|\\n)*-?$", "a(b|\xC3\xA9|\n)*-?", true, 2, 4},
                                        {"^a(b|\xC3\xA9|\\n)*-?$", "a(b|\xC3\xA9|\n)*-?", true, 0, 3},
                                        {"^a(b|\xC3\xA9|\\n)*-?$", "a(b|\xC3\xA9|\n)*-?", true, 5, 5},
                                        {"^[ab]+(-[ab]+)*$", "[ab]+(-[ab]+)*", true, 3, 6},
                                        {"b-", "b-", false, 3, 5},
                                        // After 'a' at most two characters remain: below minLength, so 'a' is refused.
                                        {"^(a-?|b+)$", "(a-?|b+)", true, 3, 5},
                                        // Leading lookaheads, as zod writes e-mails: combined with the rest.
                                        {"^(?!a)(?=.*\xC3\xA9)(a|b|\xC3\xA9|\\n|-)+$", "(?!a)(?=.*\xC3\xA9)(a|b|\xC3\xA9|\n|-)+", true, 1, 4},
                                        {"^(?!.*--)(?!-)[ab-]+$", "(?!.*--)(?!-)[ab-]+", true, 0, 5},
                                        {"^(?=.*b)a", "^(?=.*b)a", false, 2, 4}}) {
    CAPTURE(c.pattern);
    CAPTURE(c.min);
    CAPTURE(c.max);
    const nlohmann::json schema = {{"type", "string"}, {"pattern", c.pattern}, {"minLength", c.min}, {"maxLength", c.max}};
    auto g = schema_grammar(schema.dump());
    REQUIRE(g->counted.size() == 1);
    const std::regex re(c.std_regex);
    std::set<std::string> valid, prefixes;
    std::vector<std::string> level = {""};
    for (uint32_t len = 0; len <= c.max; ++len) {
      std::vector<std::string> next;
      for (const auto& s : level) {
        const bool match = c.anchored ? std::regex_match(s, re) : std::regex_search(s, re);
        if (len >= c.min && match) {
          const std::string text = "\"" + json_escape(s);
          valid.insert(text);
          for (size_t i = 0; i <= text.size(); ++i) prefixes.insert(text.substr(0, i));
        }
        for (const auto& ch : alphabet) next.push_back(s + ch);
      }
      level.swap(next);
    }
    REQUIRE(!valid.empty());
    std::vector<uint64_t> mask;
    for (int walk = 0; walk < 60; ++walk) {
      Matcher m(g, table);
      std::string text;
      for (;;) {
        CAPTURE(text);
        m.fill_mask(mask);
        CHECK(m.accepting() == (valid.count(text) > 0));
        std::vector<int32_t> live;
        for (int b = 0; b < 256; ++b) {
          const bool ours = (mask[size_t(b) / 64] >> (b % 64)) & 1;
          if (allowed_bytes.find(char(b)) == std::string::npos) {
            if (c.anchored) CHECK_MESSAGE(!ours, "byte ", b);  // outside the alphabet: the pattern refuses it
            continue;
          }
          // Unanchored, characters outside the alphabet may come too: there 'n' is checked only
          // as an escape's, and after '\\' only 'n' (other escapes may follow).
          const bool after_backslash = !text.empty() && text.back() == '\\';
          if (!c.anchored && (after_backslash ? b != 'n' : b == 'n')) continue;
          const bool theirs = prefixes.count(text + char(b)) > 0;
          CHECK_MESSAGE(ours == theirs, "byte ", b);
          if (theirs) live.push_back(b);
        }
        if (live.empty()) break;
        const int32_t pick = live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
        REQUIRE(m.advance(pick));
        text += char(pick);
      }
      CHECK(valid.count(text) > 0);
    }
  }
}

TEST_CASE("a format under minLength / maxLength: the format's strings of those lengths, escapes counted once") {
  auto table = byte_table();
  // Pydantic's HttpUrl, scaled down: every string the uri format takes, with 1..20 characters.
  auto url = schema_grammar(R"({"type":"string","format":"uri","minLength":1,"maxLength":20})");
  auto free_url = schema_grammar(R"({"type":"string","format":"uri"})");
  CHECK(accepts(url, table, R"("http://a.example/b")"));
  CHECK(accepts(url, table, R"("http://a.example/bcd")"));    // 20
  CHECK(!accepts(url, table, R"("http://a.example/bcde")"));  // 21
  CHECK(!accepts(url, table, R"("")"));
  CHECK(!accepts(url, table, R"("not a url")"));
  // Against the unbounded format and an independent count, on random strings of the format.
  std::mt19937 rng(3);
  int seen_long = 0, seen_ok = 0;
  for (int walk = 0; walk < 300; ++walk) {
    const std::string text = random_walk(free_url, table, rng, 40, 8);
    if (text.empty()) continue;
    const size_t chars = json_chars(text.substr(1, text.size() - 2));
    CAPTURE(text);
    CHECK(accepts(url, table, text) == (chars >= 1 && chars <= 20));
    (chars > 20 ? seen_long : seen_ok)++;
  }
  CHECK(seen_long > 10);
  CHECK(seen_ok > 10);
  // Escapes count one character each, under a pattern that writes them.
  auto escaped = schema_grammar(R"({"type":"string","pattern":"^(a|\\n|\")*$","minLength":2,"maxLength":3})");
  CHECK(accepts(escaped, table, R"("\n\n\n")"));
  CHECK(accepts(escaped, table, R"("a\"")"));
  CHECK(!accepts(escaped, table, R"("\n\n\n\n")"));
  CHECK(!accepts(escaped, table, R"("\n")"));
  CHECK(!accepts(escaped, table, R"("aaaa")"));
  // An email format with lengths, as pydantic and zod write e-mails with limits.
  auto email = schema_grammar(R"({"type":"string","format":"email","maxLength":11})");
  CHECK(accepts(email, table, R"("ab@cd.ef.gh")"));
  CHECK(!accepts(email, table, R"("abc@cd.ef.gh")"));
  CHECK(!accepts(email, table, R"("abcdefgh.ij")"));
}

TEST_CASE("a format with a pattern: exactly the strings of both, with the pattern's lookaheads") {
  auto table = byte_table();
  struct Case {
    std::string format, pattern, std_regex;
  };
  const std::vector<Case> cases = {
      {"ipv4", "^10\\.", "^10\\."},
      // zod's uuid: versions 1-8 and the RFC 4122 variant, or the nil and max UUIDs.
      {"uuid",
       "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-"
       "000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$",
       "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-"
       "000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
      // zod's e-mail: no leading dot and no two dots in a row, by lookaheads.
      {"email", "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$",
       "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
      {"uri", "^https://", "^https://"},
      {"date-time", "Z$", "Z$"},
  };
  std::mt19937 rng(41);
  auto walk = [&](const std::shared_ptr<const Grammar>& g) { return random_walk(g, table, rng, 80, 6); };
  for (const Case& c : cases) {
    CAPTURE(c.format);
    const nlohmann::json format_only = {{"type", "string"}, {"format", c.format}};
    nlohmann::json both = format_only;
    both["pattern"] = c.pattern;
    auto g_format = schema_grammar(format_only.dump()), g_both = schema_grammar(both.dump());
    const std::regex re(c.std_regex, std::regex::ECMAScript);
    int walks = 0;
    for (int i = 0; i < 400; ++i) {
      // Sound: every string of the combination has the format and matches the pattern.
      const std::string ours = walk(g_both);
      if (!ours.empty()) {
        CAPTURE(ours);
        ++walks;
        CHECK(accepts(g_format, table, ours));
        CHECK(std::regex_search(nlohmann::json::parse(ours).get<std::string>(), re));
      }
      // Complete: a string of the format is kept exactly when it matches the pattern.
      const std::string formatted = walk(g_format);
      if (!formatted.empty()) {
        CAPTURE(formatted);
        const bool want = std::regex_search(nlohmann::json::parse(formatted).get<std::string>(), re);
        CHECK(accepts(g_both, table, formatted) == want);
      }
    }
    CHECK(walks == 400);
  }
  // Hand-picked strings at the edges of the lookaheads and the pattern's alternatives.
  const nlohmann::json email = {{"type", "string"}, {"format", "email"}, {"pattern", cases[2].pattern}, {"maxLength", 12}};
  auto g_email = schema_grammar(email.dump());
  CHECK(accepts(g_email, table, R"("a.b@cd.ef")"));
  CHECK(!accepts(g_email, table, R"(".ab@cd.ef")"));
  CHECK(!accepts(g_email, table, R"("a..b@cd.ef")"));
  CHECK(!accepts(g_email, table, R"("a.bcde@cd.efg")"));  // 13 characters
  const nlohmann::json uuid = {{"type", "string"}, {"format", "uuid"}, {"pattern", cases[1].pattern}};
  auto g_uuid = schema_grammar(uuid.dump());
  CHECK(accepts(g_uuid, table, R"("123e4567-e89b-42d3-a456-426614174000")"));
  CHECK(accepts(g_uuid, table, R"("00000000-0000-0000-0000-000000000000")"));
  CHECK(!accepts(g_uuid, table, R"("123e4567-e89b-92d3-a456-426614174000")"));  // version 9
  CHECK(!accepts(g_uuid, table, R"("123e4567-e89b-42d3-c456-426614174000")"));  // variant c
  // Escapes through a combination count one character each, "\u0001" too (what follows an
  // unanchored end may be any character).
  auto g_controls = schema_grammar(R"j({"type":"string","pattern":"^(?!a)","maxLength":2})j");
  CHECK(accepts(g_controls, table, R"("\u0001\n")"));
  CHECK(accepts(g_controls, table, R"("b\u001f")"));
  CHECK(!accepts(g_controls, table, R"("\u0001\u0002\u0003")"));
  CHECK(!accepts(g_controls, table, R"("ab")"));
}

TEST_CASE("a format and a pattern no string meets both, and lookarounds elsewhere, are refused with the reason") {
  // zod's time pattern has no offset; JSON Schema's time format requires one.
  const std::string time = refused(R"j({"type":"string","format":"time","pattern":"^([01]\\d|2[0-3]):[0-5]\\d(?::[0-5]\\d(?:\\.\\d+)?)?$"})j");
  CHECK(time.find("no string matches") != std::string::npos);
  CHECK(time.find("format 'time'") != std::string::npos);
  CHECK(refused(R"j({"type":"string","pattern":"^(?!a)(?!.*b)(?=b)"})j").find("no string matches") != std::string::npos);
  CHECK(refused(R"j({"type":"string","pattern":"a(?!b)"})j").find("lookaround") != std::string::npos);
  CHECK(refused(R"j({"type":"string","pattern":"(?=a)b"})j").find("lookaround") != std::string::npos);
  CHECK(refused(R"j({"type":"string","pattern":"^(?=a"})j").find("')'") != std::string::npos);
  CHECK(refused(R"j({"type":"string","format":"uuid","pattern":"^(?<=a)"})j").find("lookaround") != std::string::npos);
  // A lookahead whose automaton must remember 30 characters: refused at the state limit.
  CHECK(refused(R"j({"type":"string","pattern":"^(?!.*a[ab]{30})[ab]*$"})j").find("automaton states") != std::string::npos);
}

TEST_CASE("fixed-length formats inside the bounds compile as before; bounds no string meets are refused by name") {
  auto table = byte_table();
  auto uuid = schema_grammar(R"({"type":"string","format":"uuid","minLength":36,"maxLength":40})");
  CHECK(uuid->counted.empty());  // every uuid has 36 characters: nothing to count
  CHECK(accepts(uuid, table, R"("123e4567-e89b-12d3-a456-426614174000")"));
  const std::string short_uuid = refused(R"({"type":"object","properties":{"id":{"type":"string","format":"uuid","maxLength":10}}})");
  CHECK(short_uuid.find("'id'") != std::string::npos);
  CHECK(short_uuid.find("maxLength") != std::string::npos);
  CHECK(short_uuid.find("36") != std::string::npos);
  CHECK(refused(R"({"type":"string","format":"date","minLength":11})").find("minLength") != std::string::npos);
  CHECK(refused(R"({"type":"string","pattern":"^a{2,3}$","minLength":4})").find("minLength") != std::string::npos);
  CHECK(refused(R"({"type":"string","format":"uri","minLength":5,"maxLength":4})").find("maxLength") != std::string::npos);
  // A date under a maxLength of exactly its length compiles and accepts it.
  CHECK(accepts(schema_grammar(R"({"type":"string","format":"date","maxLength":10})"), table, R"("2024-02-29")"));
}

TEST_CASE("a counted region keeps a token budget: random walks end complete") {
  auto table = byte_table({"http", "://", "example", ".com", "/path", "abcdefgh", "\""});
  // The shortest value takes 28 bytes ({"u":" and 20 characters and "}): budgets from there up.
  auto g = schema_grammar(R"({"type":"object","properties":{"u":{"type":"string","format":"uri","minLength":20,"maxLength":30}},"required":["u"]})");
  {  // the fewest bytes to finish, counted by hand: the characters minLength still asks for
    Matcher m(g, table);
    REQUIRE(m.advance_bytes(R"({"u":")"));
    CHECK(m.min_bytes_to_finish() == 22);  // 20 characters, "}
    REQUIRE(m.advance_bytes("ab:"));
    CHECK(m.min_bytes_to_finish() == 19);
    REQUIRE(m.advance_bytes("//x.example/0123456"));
    CHECK(m.min_bytes_to_finish() == 2);
    auto p = schema_grammar(R"({"type":"string","pattern":"^(a|\\n)+$","minLength":3})");
    Matcher e(p, table);
    REQUIRE(e.advance_bytes(R"("\n)"));
    CHECK(e.min_bytes_to_finish() == 3);  // two characters (a byte each at best), "
  }
  std::mt19937 rng(7);
  std::vector<uint64_t> mask;
  for (int walk = 0; walk < 200; ++walk) {
    Matcher m(g, table);
    std::string text;
    const int budget = 29 + walk % 20;
    for (int left = budget; left > 0 && !m.finished(); --left) {
      m.fill_mask(mask, uint32_t(left - 1));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
        if ((mask[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
      REQUIRE(!allowed.empty());
      const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      REQUIRE(m.advance(pick));
      text += table->bytes(pick);
    }
    CAPTURE(text);
    REQUIRE(m.accepting());
    const std::string u = nlohmann::json::parse(text)["u"].get<std::string>();
    size_t chars = 0;
    for (unsigned char ch : u) chars += (ch & 0xC0) != 0x80;
    CHECK(chars >= 20);
    CHECK(chars <= 30);
  }
}

TEST_CASE("a counted region far from its bounds reuses cached masks, and only there") {
  // Cached masks (the state with its count set aside while far from maxLength) against masks
  // computed afresh (a budget that binds nothing skips the cache), up to the limit.
  auto table = byte_table({"abcdefgh", "path/", "://", "ab", "%41", "x.y"});
  auto g = schema_grammar(R"({"type":"string","format":"uri","minLength":1,"maxLength":700})");
  std::mt19937 rng(13);
  std::vector<uint64_t> cached, fresh;
  int steps_near_limit = 0;
  for (int walk = 0; walk < 3; ++walk) {
    Matcher m(g, table);
    std::string text = "\"";
    REQUIRE(m.advance_bytes(text));
    for (int step = 0; step < 400; ++step) {
      CAPTURE(text.size());
      m.fill_mask(cached);
      m.fill_mask(fresh, m.min_bytes_to_finish() + 4000);
      REQUIRE(cached == fresh);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(table->vocab_size()); ++t)
        if (((cached[size_t(t) / 64] >> (t % 64)) & 1) && table->bytes(t) != "\"") allowed.push_back(t);
      if (allowed.empty()) break;
      // Mostly the long tokens, to get near the limit.
      int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (rng() % 2 && std::find(allowed.begin(), allowed.end(), 256) != allowed.end()) pick = 256;
      REQUIRE(m.advance(pick));
      text += table->bytes(pick);
      steps_near_limit += text.size() > 650;
    }
  }
  CHECK(steps_near_limit > 10);
}

// multipleOf (pydantic's multiple_of): each accepted integer is a multiple, each multiple
// in range is accepted; decimal steps limit the decimals; what cannot be exact is refused.
TEST_CASE("multipleOf: integers by their remainder, listed between bounds, decimals by their places") {
  auto table = byte_table();
  for (int k : {1, 3, 5, 7, 12, 250}) {
    CAPTURE(k);
    auto any = schema_grammar(R"({"type":"integer","multipleOf":)" + std::to_string(k) + "}");
    auto nonneg = schema_grammar(R"({"type":"integer","minimum":0,"multipleOf":)" + std::to_string(k) + "}");
    auto positive = schema_grammar(R"({"type":"integer","exclusiveMinimum":0,"multipleOf":)" + std::to_string(k) + "}");
    auto nonpos = schema_grammar(R"({"type":"integer","maximum":0,"multipleOf":)" + std::to_string(k) + "}");
    for (int v = -3000; v <= 3000; v += (v > -40 && v < 40) ? 1 : 37) {
      CAPTURE(v);
      const bool multiple = v % k == 0;
      CHECK(accepts(any, table, std::to_string(v)) == multiple);
      CHECK(accepts(nonneg, table, std::to_string(v)) == (multiple && v >= 0));
      CHECK(accepts(positive, table, std::to_string(v)) == (multiple && v > 0));
      CHECK(accepts(nonpos, table, std::to_string(v)) == (multiple && v <= 0));
    }
    CHECK_FALSE(accepts(any, table, "0" + std::to_string(k)));  // no leading zeros
    CHECK(accepts(any, table, "123456789012345") == (123456789012345LL % k == 0));
  }
  auto listed = schema_grammar(R"({"type":"integer","minimum":-17,"maximum":130,"multipleOf":5})");
  for (int v = -40; v <= 160; ++v) CHECK(accepts(listed, table, std::to_string(v)) == (v % 5 == 0 && v >= -17 && v <= 130));
  auto big = schema_grammar(R"({"type":"integer","minimum":0,"maximum":1000000,"multipleOf":100000})");
  CHECK(accepts(big, table, "300000"));
  CHECK_FALSE(accepts(big, table, "350000"));
  auto cents = schema_grammar(R"({"type":"number","multipleOf":0.01})");
  for (const char* ok : {"0", "12", "-3.5", "19.99", "0.01"}) CHECK(accepts(cents, table, ok));
  for (const char* no : {"19.999", "1e3", "01.5", "1."}) CHECK_FALSE(accepts(cents, table, no));
  CHECK(accepts(schema_grammar(R"({"type":"integer","minimum":2,"maximum":9,"multipleOf":0.5})"), table, "7"));
  for (const char* bad : {R"({"type":"integer","multipleOf":0})", R"({"type":"number","multipleOf":0.25})",
                          R"({"type":"integer","multipleOf":5000})", R"({"type":"integer","minimum":3,"maximum":4,"multipleOf":5})",
                          R"({"type":"integer","minimum":12,"multipleOf":5})", R"({"type":"number","minimum":1,"multipleOf":0.1})",
                          R"({"type":"integer","multipleOf":"5"})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(schema_grammar(bad), InputError);
  }
}

// uniqueItems over a finite set (pydantic's set[Enum]): every accepted array is distinct and
// within the bounds, and every such array is accepted; free items are refused.
TEST_CASE("uniqueItems: arrays of distinct values from an enum, within their bounds") {
  auto table = byte_table();
  const std::vector<std::string> values = {R"("a")", R"("b")", R"("c")", "7"};
  auto g = schema_grammar(R"({"type":"array","items":{"enum":["a","b","c",7,"a"]},"uniqueItems":true,"minItems":1,"maxItems":3})");
  auto ref = schema_grammar(R"({"$defs":{"L":{"enum":["a","b","c",7]}},"type":"array","items":{"$ref":"#/$defs/L"},"uniqueItems":true})");
  int accepted = 0;
  // Every sequence of up to 5 picks (repeats included) from the four values.
  std::vector<int> pick;
  std::function<void()> each = [&] {
    std::string text = "[";
    std::set<int> seen;
    for (size_t i = 0; i < pick.size(); ++i) text += (i ? "," : "") + values[size_t(pick[i])], seen.insert(pick[i]);
    text += "]";
    const bool distinct = seen.size() == pick.size();
    CAPTURE(text);
    CHECK(accepts(g, table, text) == (distinct && !pick.empty() && pick.size() <= 3));
    CHECK(accepts(ref, table, text) == distinct);
    accepted += distinct ? 1 : 0;
    if (pick.size() == 5) return;
    for (int v = 0; v < 4; ++v) pick.push_back(v), each(), pick.pop_back();
  };
  each();
  CHECK(accepted == 1 + 4 + 12 + 24 + 24);
  auto flags = schema_grammar(R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true})");
  CHECK(accepts(flags, table, "[true,false]"));
  CHECK_FALSE(accepts(flags, table, "[true,true]"));
  CHECK(accepts(schema_grammar(R"({"type":"array","items":{"type":"string"},"uniqueItems":false})"), table, R"(["x","x"])"));
  for (const char* bad : {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})",
                          R"({"type":"array","items":{"enum":[1,2,3,4,5,6,7,8,9]},"uniqueItems":true})",
                          R"({"type":"array","items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})",
                          R"({"type":"array","items":{"enum":[1,2]},"uniqueItems":"yes"})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(schema_grammar(bad), InputError);
  }
}
