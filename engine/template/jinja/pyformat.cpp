// pyformat.cpp — float repr, str repr, json.dumps, %-formatting and str.format as CPython
// writes them.
#include "engine/template/jinja/pyformat.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/template/jinja/error.h"
#include "engine/template/jinja/unicode.h"

namespace spark::jinja {

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round-trip digits, e.g. "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // digits before the decimal point
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + ebuf;
}

void check_formatted_size(size_t bytes) {
  if (bytes > kMaxFormattedBytes)
    throw TemplateError("formatted text exceeds the limit of " + std::to_string(kMaxFormattedBytes) + " bytes");
}

int64_t float_to_int(double f) {
  if (std::isnan(f)) throw TemplateError("cannot convert float NaN to integer");
  if (!(f > -9.2e18 && f < 9.2e18)) throw TemplateError("cannot convert float " + float_repr(f) + " to a 64-bit integer");
  return static_cast<int64_t>(f);
}

static bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  bool plain = true;  // printable ASCII without the quote or a backslash: copied as is
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F || c == quote || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) return out + s + quote;
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

// ---- json.dumps -----------------------------------------------------------------------

static void json_ascii_char(std::string& out, char c) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        out += buf;
      } else {
        out += c;
      }
  }
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  if (!ensure_ascii || is_ascii(s)) {
    for (char c : s) json_ascii_char(out, c);
  } else {
    auto escape_cp = [&](unsigned cp) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    };
    for (char32_t cp : utf8_decode(s)) {
      if (cp < 0x80) {
        json_ascii_char(out, static_cast<char>(cp));
      } else if (cp >= 0x10000 && cp <= 0x10FFFF) {
        unsigned v = cp - 0x10000;
        escape_cp(0xD800 + (v >> 10));
        escape_cp(0xDC00 + (v & 0x3FF));
      } else {
        escape_cp(static_cast<unsigned>(cp));
      }
    }
  }
  out += '"';
}

static std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::STRING: return k.as_string();
    case Kind::BOOL: return k.as_bool() ? "true" : "false";
    case Kind::INT: return std::to_string(k.as_int());
    case Kind::FLOAT: {
      double f = k.as_float();
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
      return float_repr(f);
    }
    case Kind::NONE: return "null";
    default:
      throw TemplateError(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
  }
}

namespace {
struct JsonWriter {
  const JsonOptions& o;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    check_formatted_size(out.size() + o.indent->size() * static_cast<size_t>(level));
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  }

  void write(const Value& v, int level) {
    if (level > 500) throw TemplateError("value nested too deeply for tojson");
    check_formatted_size(out.size());
    switch (v.kind()) {
      case Kind::NONE: out += "null"; return;
      case Kind::BOOL: out += v.as_bool() ? "true" : "false"; return;
      case Kind::INT: out += std::to_string(v.as_int()); return;
      case Kind::FLOAT: {
        double f = v.as_float();
        if (std::isnan(f)) out += "NaN";
        else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(f);
        return;
      }
      case Kind::STRING: json_string(out, v.as_string(), o.ensure_ascii); return;
      case Kind::LIST:
      case Kind::TUPLE: {
        if (v.view() != DictView::NONE)
          throw TemplateError(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
        const ValueList& items = v.items();
        if (items.empty()) { out += "[]"; return; }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (o.indent) newline(level + 1);
          write(items[i], level + 1);
        }
        if (o.indent) newline(level);
        out += ']';
        return;
      }
      case Kind::DICT: {
        const Dict& d = v.as_dict();
        if (d.size() == 0) { out += "{}"; return; }
        std::vector<const std::pair<Value, Value>*> entries;
        for (const auto& e : d.entries) entries.push_back(&e);
        if (o.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](auto* a, auto* b) { return less_than(a->first, b->first); });
        out += '{';
        bool first = true;
        for (const auto* e : entries) {
          if (!first) out += item_sep;
          first = false;
          if (o.indent) newline(level + 1);
          json_string(out, json_key(e->first), o.ensure_ascii);
          out += key_sep;
          write(e->second, level + 1);
        }
        if (o.indent) newline(level);
        out += '}';
        return;
      }
      default:
        if (v.is_unsafe()) throw TemplateError(v.as_string());
        throw TemplateError(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
    }
  }
};
}  // namespace

std::string json_dumps(const Value& v, const JsonOptions& options) {
  JsonWriter w{options, "", "", ""};
  w.item_sep = options.item_separator.value_or(options.indent ? "," : ", ");
  w.key_sep = options.key_separator.value_or(": ");
  w.write(v, 0);
  return w.out;
}

// ---- printf-style formatting ----------------------------------------------------------

namespace {
struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

std::string pad(std::string s, const Spec& spec, bool numeric) {
  size_t len = utf8_length(s);
  if (spec.width < 0 || len >= static_cast<size_t>(spec.width)) return s;
  size_t fill = static_cast<size_t>(spec.width) - len;
  if (spec.flags.find('-') != std::string::npos) return s + std::string(fill, ' ');
  if (numeric && spec.flags.find('0') != std::string::npos) {
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
    return s.substr(0, sign) + std::string(fill, '0') + s.substr(sign);
  }
  return std::string(fill, ' ') + s;
}

std::string format_number(const Value& v, const Spec& spec) {
  if (!v.is_number())
    throw TemplateError(std::string("%") + spec.type + " format: a real number is required, not " + type_name(v));
  std::string sign = spec.flags.find('+') != std::string::npos ? "+"
                     : spec.flags.find(' ') != std::string::npos ? " " : "";
  char buf[512];
  std::string s;
  switch (spec.type) {
    case 'd': case 'i': case 'u': {
      int64_t i = v.is_float() ? float_to_int(v.as_float()) : v.as_int();
      s = std::to_string(i);
      break;
    }
    case 'x': case 'X': case 'o': {
      if (v.is_float()) throw TemplateError(std::string("%") + spec.type + " format: an integer is required, not float");
      int64_t i = v.as_int();
      const char* f = spec.type == 'x' ? "%llx" : spec.type == 'X' ? "%llX" : "%llo";
      std::snprintf(buf, sizeof buf, f, static_cast<unsigned long long>(i < 0 ? -i : i));
      s = std::string(i < 0 ? "-" : "") + buf;
      break;
    }
    default: {
      char f[16];
      int precision = spec.precision < 0 ? 6 : std::min(spec.precision, 100);
      std::snprintf(f, sizeof f, "%%.%d%c", precision, spec.type);
      std::snprintf(buf, sizeof buf, f, v.as_float());
      s = buf;
    }
  }
  if (!sign.empty() && s[0] != '-') s = sign + s;
  return s;
}

std::string format_one(const Value& v, const Spec& spec) {
  switch (spec.type) {
    case 's': case 'r': case 'a': {
      std::string s = spec.type == 's' ? to_str(v) : repr(v);
      if (spec.precision >= 0) {
        std::u32string cps = utf8_decode(s);
        if (cps.size() > static_cast<size_t>(spec.precision)) s = utf8_encode(cps.substr(0, spec.precision));
      }
      return pad(s, spec, false);
    }
    case 'c': {
      if (v.is_string()) return pad(v.as_string(), spec, false);
      std::string s;
      utf8_append(s, static_cast<char32_t>(v.as_int()));
      return pad(s, spec, false);
    }
    default: return pad(format_number(v, spec), spec, true);
  }
}
}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  ValueList positional;
  if (args.is_tuple()) positional = args.items();
  else if (!args.is_dict()) positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out += fmt[i]; continue; }
    if (++i >= fmt.size()) throw TemplateError("incomplete format");
    if (fmt[i] == '%') { out += '%'; continue; }
    const Value* mapped = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !args.is_dict()) throw TemplateError("format requires a mapping");
      mapped = args.as_dict().find(fmt.substr(i + 1, close - i - 1));
      if (!mapped) throw TemplateError("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    Spec spec;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) spec.flags += fmt[i++];
    auto read_int = [&](int& target) {
      if (i < fmt.size() && fmt[i] == '*') {
        if (next >= positional.size()) throw TemplateError("not enough arguments for format string");
        target = static_cast<int>(std::clamp<int64_t>(positional[next++].as_int(), -100000, 100000));
        ++i;
        return;
      }
      int n = -1;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') n = std::min(std::max(n, 0) * 10 + (fmt[i++] - '0'), 1000000);
      target = std::min(n, 100000);
    };
    read_int(spec.width);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      read_int(spec.precision);
      if (spec.precision < 0) spec.precision = 0;
    }
    while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw TemplateError("incomplete format");
    spec.type = fmt[i];
    if (std::string("sradiuxXoeEfFgGc").find(spec.type) == std::string::npos)
      throw TemplateError(std::string("unsupported format character '") + spec.type + "'");
    if (!mapped) {
      if (next >= positional.size()) throw TemplateError("not enough arguments for format string");
      mapped = &positional[next++];
    }
    out += format_one(*mapped, spec);
    check_formatted_size(out.size());
  }
  if (!args.is_dict() && next < positional.size())
    throw TemplateError("not all arguments converted during string formatting");
  return out;
}

// ---- str.format -------------------------------------------------------------------------

static std::string apply_format_spec(const Value& v, const std::string& spec_text) {
  // [[fill]align][sign][#][0][width][,][.precision][type]
  size_t i = 0;
  char fill = ' ', align = 0;
  if (spec_text.size() >= 2 && std::string("<>^=").find(spec_text[1]) != std::string::npos) {
    fill = spec_text[0];
    align = spec_text[1];
    i = 2;
  } else if (!spec_text.empty() && std::string("<>^=").find(spec_text[0]) != std::string::npos) {
    align = spec_text[0];
    i = 1;
  }
  Spec spec;
  if (i < spec_text.size() && (spec_text[i] == '+' || spec_text[i] == '-' || spec_text[i] == ' ')) {
    if (spec_text[i] != '-') spec.flags += spec_text[i];
    ++i;
  }
  if (i < spec_text.size() && spec_text[i] == '0') {
    spec.flags += '0';
    ++i;
  }
  int width = -1;
  while (i < spec_text.size() && isdigit(static_cast<unsigned char>(spec_text[i])))
    width = std::min(std::max(width, 0) * 10 + (spec_text[i++] - '0'), 1000000);
  if (i < spec_text.size() && spec_text[i] == '.') {
    ++i;
    spec.precision = 0;
    while (i < spec_text.size() && isdigit(static_cast<unsigned char>(spec_text[i])))
      spec.precision = std::min(spec.precision * 10 + (spec_text[i++] - '0'), 1000000);
  }
  char type = i < spec_text.size() ? spec_text[i] : 0;
  std::string s;
  if (type == 0) {
    s = to_str(v);
    if (spec.precision >= 0 && v.is_string()) s = utf8_encode(utf8_decode(s).substr(0, spec.precision));
  } else if (type == 's') {
    s = to_str(v);
    if (spec.precision >= 0) s = utf8_encode(utf8_decode(s).substr(0, spec.precision));
  } else {
    spec.type = type == 'n' ? 'd' : type;
    s = format_number(v, spec);
  }
  width = std::min(width, 100000);
  size_t len = utf8_length(s);
  if (width < 0 || len >= static_cast<size_t>(width)) return s;
  size_t n = static_cast<size_t>(width) - len;
  if (!align) align = (v.is_number() && !v.is_bool()) || (v.is_bool() && type) ? '>' : '<';
  if (spec.flags.find('0') != std::string::npos && align == '>' && fill == ' ') {
    fill = '0';
    align = '=';
  }
  std::string f(n, fill);
  switch (align) {
    case '<': return s + f;
    case '^': return std::string(n / 2, fill) + s + std::string(n - n / 2, fill);
    case '=': {
      size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      return s.substr(0, sign) + f + s.substr(sign);
    }
    default: return f + s;
  }
}

std::string str_format(const std::string& fmt, const CallArgs& call) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
      throw TemplateError("Single '}' encountered in format string");
    }
    if (c != '{') { out += c; continue; }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field = field.substr(0, bang);
    }
    Value v;
    if (field.empty() || isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = auto_index++;
      if (!field.empty()) {
        if (field.size() > 9 || field.find_first_not_of("0123456789") != std::string::npos)
          throw TemplateError("unsupported format field '" + field + "'");
        index = static_cast<size_t>(std::stoul(field));
      }
      if (index >= call.args.size())
        throw TemplateError("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      v = call.args[index];
    } else {
      bool found = false;
      for (const auto& [name, value] : call.kwargs)
        if (name == field) { v = value; found = true; }
      if (!found) throw TemplateError("KeyError: '" + field + "'");
    }
    if (conversion == 'r') v = Value::string(repr(v));
    else if (conversion == 's') v = Value::string(to_str(v));
    out += apply_format_spec(v, spec);
    check_formatted_size(out.size());
  }
  return out;
}

}  // namespace spark::jinja
