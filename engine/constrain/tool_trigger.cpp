// tool_trigger.cpp — finding where a model opens a tool call, and constraining the rest.
#include "engine/constrain/tool_trigger.h"

#include <algorithm>

#include "engine/constrain/constraint.h"

namespace spark::constrain {
namespace {

constexpr size_t kMaxName = 256;  // longer recipients are no declared function's

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}
bool ends_with(const std::string& s, std::string_view end) {
  return s.size() >= end.size() && std::string_view(s).substr(s.size() - end.size()) == end;
}

}  // namespace

ToolCallWatch::ToolCallWatch(std::shared_ptr<const ToolTrigger> trigger) : trigger_(std::move(trigger)) {}

void ToolCallWatch::start(const Constraint& c, std::string_view rest, std::shared_ptr<Matcher>& active) {
  std::shared_ptr<Matcher> m = c.new_matcher();
  // A token that runs past the opening into bytes no call allows has already left the
  // grammar: the output stays free (the parser then reads it as whatever it is).
  if (!rest.empty() && !m->advance_bytes(rest)) return;
  if (!m->finished()) active = std::move(m);
}

void ToolCallWatch::observe(int32_t token, std::shared_ptr<Matcher>& active) {
  if (active) {
    if (active->finished()) active.reset();  // the call is closed: free text again
    return;
  }
  const ToolTrigger& t = *trigger_;
  const std::string& text = t.tokens->text(token);
  const size_t keep = std::max(t.opening.size(), t.header_end.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const std::string_view rest = std::string_view(text).substr(i + 1);
    if (t.format == ToolTrigger::Format::LEADING) {
      if (seen_text_) return;  // calls open the answer or not at all
      if (is_space(c)) continue;
      seen_text_ = true;
      if (c == '{') start(*t.call, rest, active);
      return;
    }
    if (t.format == ToolTrigger::Format::HEADER && in_name_) {
      if (is_name_char(c) && name_.size() < kMaxName) {
        name_ += c;
        continue;
      }
      in_name_ = false;
      named_ = true;
    }
    tail_ += c;
    if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
    if (t.format == ToolTrigger::Format::TAG) {
      if (!ends_with(tail_, t.opening)) continue;
      tail_.clear();
      start(*t.call, rest, active);
      return;
    }
    if (ends_with(tail_, t.opening)) {  // HEADER: a header names its function
      in_name_ = true;
      named_ = false;
      name_.clear();
    } else if (ends_with(tail_, t.header_end) && (named_ || in_name_)) {
      in_name_ = named_ = false;
      tail_.clear();
      for (const auto& [name, args] : t.arguments)
        if (name == name_) {
          start(*args, rest, active);
          return;
        }
    }
  }
}

}  // namespace spark::constrain
