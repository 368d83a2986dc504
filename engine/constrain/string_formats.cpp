// string_formats.cpp — JSON string contents: characters, formats and patterns.
#include "engine/constrain/string_formats.h"

#include <map>
#include <vector>

#include "engine/constrain/intersection.h"
#include "engine/constrain/regex.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

ByteSet range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.add_range(lo, hi);
  return s;
}

// Formats as patterns over what appears between the quotes (RFC 3339 dates and times,
// RFC 4122 UUIDs, dotted-quad IPv4, RFC 4291 IPv6, a conservative subset of RFC 5322
// addresses, and RFC 3986 URIs).
const std::map<std::string, std::string>& format_patterns() {
  // Calendar dates only (Python's date.fromisoformat, which jsonschema checks with, takes no
  // year 0000, no April 31 and no February 29 outside leap years).
  static const std::string year = R"((\d{3}[1-9]|\d{2}[1-9]0|\d[1-9]00|[1-9]000))";
  static const std::string leap_year = R"((\d\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
  static const std::string date = "(" + year + R"(-(0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|)" + year +
                                  R"(-(0[469]|11)-(0[1-9]|[12]\d|30)|)" + year + R"(-02-(0[1-9]|1\d|2[0-8])|)" +
                                  leap_year + "-02-29)";
  static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string label = R"([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)";
  // RFC 4291 text forms without an embedded IPv4 address or a zone.
  static const std::string g = "[0-9a-fA-F]{1,4}";
  static const std::string ipv6 = "((" + g + ":){7}" + g + "|(" + g + ":){1,7}:|(" + g + ":){1,6}:" + g + "|(" + g + ":){1,5}(:" + g +
                                  "){1,2}|(" + g + ":){1,4}(:" + g + "){1,3}|(" + g + ":){1,3}(:" + g + "){1,4}|(" + g + ":){1,2}(:" + g +
                                  "){1,5}|" + g + ":(:" + g + "){1,6}|:((:" + g + "){1,7}|:))";
  // RFC 3986's URI rule (IPvFuture literals aside): scheme ":" hier-part ["?" query]
  // ["#" fragment], '%' only in escapes, '[' ']' only around an IPv6 host.
  static const std::string pct = "%[0-9A-Fa-f][0-9A-Fa-f]";
  static const std::string pchar = R"(([A-Za-z0-9\-._~!$&'()*+,;=:@]|)" + pct + ")";
  static const std::string segment = pchar + "*", segment_nz = pchar + "+";
  static const std::string authority = R"(((([A-Za-z0-9\-._~!$&'()*+,;=:]|)" + pct + R"()*@)?(\[)" + ipv6 +
                                       R"(\]|([A-Za-z0-9\-._~!$&'()*+,;=]|)" + pct + R"()*)(:\d*)?))";
  static const std::string hier_part = "(//" + authority + "(/" + segment + ")*|/(" + segment_nz + "(/" + segment + ")*)?|" +
                                       segment_nz + "(/" + segment + ")*)?";
  static const std::string query = "(" + pchar + "|[/?])*";
  static const std::string uri = "[a-zA-Z][a-zA-Z0-9+.-]*:" + hier_part + R"((\?)" + query + ")?(#" + query + ")?";
  static const std::string email = R"([A-Za-z0-9_%+-]+(\.[A-Za-z0-9_%+-]+)*@)" + label + R"((\.)" + label + ")+";
  // RFC 3339 appendix A durations (ISO 8601): P1Y2M3DT4H5M6S, PT1S, P2W, ...
  static const std::string dur_time = R"(T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S))";
  static const std::string duration = R"(P((\d+Y(\d+M(\d+D)?)?|\d+M(\d+D)?|\d+D)()" + dur_time + ")?|" + dur_time + R"(|\d+W))";
  auto uuid_version = [](char v) {
    return std::string("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-") + v + "[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}";
  };
  static const std::map<std::string, std::string> patterns = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"ipv4", octet + R"((\.)" + octet + "){3}"},
      {"email", email},
      {"uri", uri},
      {"ipv6", ipv6},
      {"duration", duration},
      // The formats pydantic writes beyond JSON Schema's: UUIDs of one version (RFC 4122
      // variant), any IP address, "Name <addr>" e-mails (plain addresses here), multi-host
      // DSNs (one host here) and base64 ("password" and "binary" are any string: json_schema.cpp).
      {"uuid1", uuid_version('1')},
      {"uuid3", uuid_version('3')},
      {"uuid4", uuid_version('4')},
      {"uuid5", uuid_version('5')},
      {"uuid6", uuid_version('6')},
      {"uuid7", uuid_version('7')},
      {"uuid8", uuid_version('8')},
      {"ipvanyaddress", "(" + octet + R"((\.)" + octet + "){3}|" + ipv6 + ")"},
      {"name-email", email},
      {"multi-host-uri", uri},
      {"base64", "([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"},
  };
  return patterns;
}

}  // namespace

uint32_t add_utf8_multibyte_char(GrammarBuilder& b) {
  const Elem cont = b.bytes(range(0x80, 0xBF));
  return b.rule_of({
      {b.bytes(range(0xC2, 0xDF)), cont},
      {b.byte(0xE0), b.bytes(range(0xA0, 0xBF)), cont},
      {b.bytes(range(0xE1, 0xEC)), cont, cont},
      {b.byte(0xED), b.bytes(range(0x80, 0x9F)), cont},
      {b.bytes(range(0xEE, 0xEF)), cont, cont},
      {b.byte(0xF0), b.bytes(range(0x90, 0xBF)), cont, cont},
      {b.bytes(range(0xF1, 0xF3)), cont, cont, cont},
      {b.byte(0xF4), b.bytes(range(0x80, 0x8F)), cont, cont},
  });
}

uint32_t add_json_string_char(GrammarBuilder& b) {
  ByteSet plain = range(0x20, 0x7E);
  plain.remove('"');
  plain.remove('\\');
  // The escapes string_body.cpp allows: \u only for controls.
  ByteSet escapes, hex, low, del;
  for (char c : std::string_view("\"\\bfnrt")) escapes.add(uint8_t(c));
  for (char c : std::string_view("0123456789abcdefABCDEF")) hex.add(uint8_t(c));
  low.add('0'), low.add('1'), del.add('f'), del.add('F');
  std::vector<Elem> u00 = b.literal("\\u00");
  std::vector<Elem> control = u00, delete_char = u00;
  control.push_back(b.bytes(low)), control.push_back(b.bytes(hex));
  delete_char.push_back(b.byte('7')), delete_char.push_back(b.bytes(del));
  return b.rule_of({
      {b.bytes(plain)},
      {GrammarBuilder::call(add_utf8_multibyte_char(b))},
      {b.byte('\\'), b.bytes(escapes)},
      control,
      delete_char,
  });
}

uint32_t add_text_char(GrammarBuilder& b) {
  ByteSet plain = range(0x20, 0x7E);
  plain.add('\t'), plain.add('\n'), plain.add('\r');
  return b.rule_of({{b.bytes(plain)}, {GrammarBuilder::call(add_utf8_multibyte_char(b))}});
}

uint32_t add_string_format(GrammarBuilder& b, const std::string& format, RegexContext context) {
  const auto& patterns = format_patterns();
  auto it = patterns.find(format);
  if (it == patterns.end()) {
    std::string known;
    for (const auto& [name, _] : patterns) known += (known.empty() ? "" : ", ") + name;
    throw InputError("JSON schema: unsupported format '" + format + "' (supported: " + known + ")");
  }
  return add_regex(b, it->second, context);
}

namespace {

// The index of the ')' closing the group opened at `open`, past escapes and classes.
size_t group_end(std::string_view p, size_t open) {
  int depth = 0;
  for (size_t i = open; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {  // a class: a ']' right after '[' or '[^' is literal
      i += p.substr(i + 1, 1) == "^" ? 2 : 1;
      if (p.substr(i, 1) == "]") ++i;
      for (; i < p.size() && p[i] != ']'; ++i)
        if (p[i] == '\\') ++i;
    } else if (p[i] == '(') {
      ++depth;
    } else if (p[i] == ')' && --depth == 0) {
      return i;
    }
  }
  throw InputError("regex '" + std::string(p.substr(0, 80)) + "': missing ')'");
}

bool ends_anchored(std::string_view p) { return p.size() >= 2 && p.back() == '$' && p[p.size() - 2] != '\\'; }

}  // namespace

// JSON Schema patterns search: without '^' any text may come first, without '$' any after.
// Lookaheads right after '^' ((?=X) and (?!X), as zod writes e-mails) hold for the whole
// string: it must, or must not, start with a match of X.
uint32_t add_string_pattern(GrammarBuilder& b, std::string_view pattern, RegexContext context) {
  const bool anchored_start = !pattern.empty() && pattern.front() == '^';
  struct Lookahead {
    bool negative;
    std::string_view body;
  };
  std::vector<Lookahead> lookaheads;
  std::string rest(pattern);
  if (anchored_start) {
    size_t i = 1;
    while (pattern.substr(i, 3) == "(?=" || pattern.substr(i, 3) == "(?!") {
      const size_t end = group_end(pattern, i);
      lookaheads.push_back({pattern[i + 2] == '!', pattern.substr(i + 3, end - i - 3)});
      i = end + 1;
    }
    rest = "^" + std::string(pattern.substr(i));
  }
  std::vector<Elem> seq;
  const bool json = context == RegexContext::JSON_STRING;
  const Elem any = GrammarBuilder::call(b.star(json ? add_json_string_char(b) : add_text_char(b)));
  if (!anchored_start) seq.push_back(any);
  seq.push_back(GrammarBuilder::call(add_regex(b, rest, context)));
  if (!ends_anchored(pattern)) seq.push_back(any);
  uint32_t rule = b.rule_of({seq});
  for (const Lookahead& l : lookaheads) {
    std::vector<Elem> start{GrammarBuilder::call(add_regex(b, l.body, context))};
    if (!ends_anchored(l.body)) start.push_back(any);
    rule = add_intersection(b, rule, b.rule_of({start}), l.negative ? Combine::FIRST_NOT_SECOND : Combine::BOTH,
                            "pattern '" + std::string(pattern.substr(0, 80)) + "'", json);
  }
  return rule;
}

uint32_t add_string_format_and_pattern(GrammarBuilder& b, const std::string& format, std::string_view pattern,
                                       RegexContext context) {
  const uint32_t f = add_string_format(b, format, context);
  const uint32_t p = add_string_pattern(b, pattern, context);
  return add_intersection(b, f, p, Combine::BOTH, "format '" + format + "' and pattern '" + std::string(pattern.substr(0, 80)) + "'",
                          context == RegexContext::JSON_STRING);
}

}  // namespace spark::constrain
