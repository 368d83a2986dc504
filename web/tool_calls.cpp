// tool_calls.cpp — the streaming output parser (reasoning / content / tool calls) and the
// tool-call JSON readers.
#include "web/tool_calls.h"

#include "web/harmony_parser.h"

#include <random>

#include <nlohmann/json.hpp>

namespace spark {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
// Tool-call arguments nest shallowly; deeper text is not a call we would hand to a client.
constexpr size_t kMaxToolJsonDepth = 32;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Where `tag` starts in buf (from `from` on), or where a suffix of buf that is a proper
// prefix of `tag` starts (partial = true), or npos.
size_t find_tag(std::string_view buf, size_t from, std::string_view tag, bool& partial) {
  partial = false;
  size_t pos = buf.find(tag, from);
  if (pos != std::string_view::npos) return pos;
  size_t longest = std::min(tag.size() - 1, buf.size() - std::min(from, buf.size()));
  for (size_t len = longest; len > 0; --len)
    if (buf.substr(buf.size() - len) == tag.substr(0, len)) {
      partial = true;
      return buf.size() - len;
    }
  return std::string_view::npos;
}

// The end (one past) of the JSON object starting at text[start] == '{', or npos when the
// text ends first. Linear: strings and escapes are skipped in one pass.
size_t object_end(std::string_view text, size_t start) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (depth == 0) return std::string_view::npos;
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

size_t json_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

bool parse_tool_call_json(std::string_view text, ToolCall& call) {
  text = trim(text);
  if (text.empty() || text.front() != '{' || json_depth(text, kMaxToolJsonDepth) > kMaxToolJsonDepth) return false;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  std::string arguments = "{}";
  if (args != j.end()) {
    if (args->is_object()) arguments = args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    else if (args->is_string()) arguments = args->get<std::string>();
    else if (!args->is_null()) return false;
  }
  call.id = new_tool_call_id();
  call.name = name->get<std::string>();
  call.arguments = std::move(arguments);
  return true;
}

bool parse_llama_tool_calls(std::string_view text, std::vector<ToolCall>& calls) {
  std::vector<ToolCall> found;
  size_t i = 0;
  for (;;) {
    while (i < text.size() && (is_space(text[i]) || (text[i] == ';' && !found.empty()))) ++i;
    if (i == text.size()) break;
    if (text[i] != '{') return false;
    size_t end = object_end(text, i);
    if (end == std::string_view::npos) return false;
    ToolCall call;
    if (!parse_tool_call_json(text.substr(i, end - i), call)) return false;
    found.push_back(std::move(call));
    i = end;
  }
  if (found.empty()) return false;
  calls = std::move(found);
  return true;
}

OutputParser::OutputParser(OutputParserOptions options) : opt_(options) {
  if (opt_.reasoning && opt_.starts_in_reasoning) mode_ = Mode::REASONING;
  if (opt_.harmony) harmony_ = std::make_unique<HarmonyParser>();
}

OutputParser::~OutputParser() = default;

std::vector<OutputEvent> OutputParser::push(std::string_view delta) {
  std::vector<OutputEvent> out;
  if (harmony_) {
    out = harmony_->push(delta);
  } else {
    buf_.append(delta);
    run(out, false);
  }
  for (const auto& e : out) num_calls_ += harmony_ && e.kind == OutputEvent::TOOL_CALL;
  return out;
}

std::vector<OutputEvent> OutputParser::finish(bool stopped) {
  std::vector<OutputEvent> out;
  if (!harmony_) {
    run(out, true);
    return out;
  }
  out = harmony_->finish(stopped);
  for (const auto& e : out) num_calls_ += e.kind == OutputEvent::TOOL_CALL;
  return out;
}

void OutputParser::emit(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (kind == OutputEvent::CONTENT) any_content_ = true;
  if (!out.empty() && out.back().kind == kind && kind != OutputEvent::TOOL_CALL) {
    out.back().text.append(text);
    return;
  }
  OutputEvent e;
  e.kind = kind;
  e.text = std::string(text);
  out.push_back(std::move(e));
}

void OutputParser::end_tool_body(std::vector<OutputEvent>& out, size_t body_len, bool closed) {
  std::string_view body(buf_.data(), body_len);
  ToolCall call;
  if (parse_tool_call_json(body, call)) {
    OutputEvent e;
    e.kind = OutputEvent::TOOL_CALL;
    e.call = std::move(call);
    out.push_back(std::move(e));
    ++num_calls_;
  } else {
    // Not a call after all: the client sees exactly what the model wrote.
    std::string raw = std::string(kToolOpen) + std::string(body) + (closed ? std::string(kToolClose) : "");
    emit(out, OutputEvent::CONTENT, raw);
  }
  buf_.erase(0, closed ? body_len + kToolClose.size() : buf_.size());
  scanned_ = 0;
}

void OutputParser::run(std::vector<OutputEvent>& out, bool final) {
  for (;;) {
    bool partial = false;
    switch (mode_) {
      case Mode::START: {
        size_t first = 0;
        while (first < buf_.size() && is_space(buf_[first])) ++first;
        if (first == buf_.size()) {
          if (!final) return;
          buf_.clear();  // only whitespace: nothing to say
          return;
        }
        std::string_view rest = std::string_view(buf_).substr(first);
        if (opt_.reasoning) {
          if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
            buf_.erase(0, first + kThinkOpen.size());
            mode_ = Mode::REASONING;
            continue;
          }
          if (!final && rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest) return;
        }
        if (opt_.tools == ToolFormat::LLAMA3 && rest.front() == '{' && !any_content_) {
          mode_ = Mode::LLAMA_JSON;
          continue;
        }
        mode_ = Mode::CONTENT;
        continue;
      }
      case Mode::REASONING: {
        size_t pos = find_tag(buf_, 0, kThinkClose, partial);
        if (pos == std::string::npos || (partial && final)) {
          emit(out, OutputEvent::REASONING, buf_);
          buf_.clear();
          return;
        }
        emit(out, OutputEvent::REASONING, std::string_view(buf_).substr(0, pos));
        if (partial) {
          buf_.erase(0, pos);
          return;
        }
        buf_.erase(0, pos + kThinkClose.size());
        mode_ = Mode::START;  // the answer may still open with a Llama JSON call
        opt_.reasoning = false;
        strip_leading_ws_ = true;
        continue;
      }
      case Mode::CONTENT: {
        if (strip_leading_ws_) {
          size_t first = 0;
          while (first < buf_.size() && is_space(buf_[first])) ++first;
          buf_.erase(0, first);
          if (buf_.empty()) return;
          strip_leading_ws_ = false;
        }
        if (opt_.tools != ToolFormat::HERMES) {
          emit(out, OutputEvent::CONTENT, buf_);
          buf_.clear();
          return;
        }
        size_t pos = find_tag(buf_, 0, kToolOpen, partial);
        if (pos == std::string::npos || (partial && final)) {
          emit(out, OutputEvent::CONTENT, buf_);
          buf_.clear();
          return;
        }
        emit(out, OutputEvent::CONTENT, std::string_view(buf_).substr(0, pos));
        if (partial) {
          buf_.erase(0, pos);
          return;
        }
        buf_.erase(0, pos + kToolOpen.size());
        mode_ = Mode::TOOL;
        scanned_ = 0;
        continue;
      }
      case Mode::TOOL: {
        size_t from = scanned_ >= kToolClose.size() ? scanned_ - (kToolClose.size() - 1) : 0;
        size_t pos = buf_.find(kToolClose, from);
        if (pos == std::string::npos) {
          scanned_ = buf_.size();
          if (final) {
            end_tool_body(out, buf_.size(), false);
            mode_ = Mode::CONTENT;
          }
          return;
        }
        end_tool_body(out, pos, true);
        mode_ = Mode::CONTENT;
        strip_leading_ws_ = true;
        continue;
      }
      case Mode::LLAMA_JSON: {
        if (!final) return;  // a call is only known once the whole answer is there
        std::vector<ToolCall> calls;
        if (parse_llama_tool_calls(buf_, calls)) {
          for (auto& c : calls) {
            OutputEvent e;
            e.kind = OutputEvent::TOOL_CALL;
            e.call = std::move(c);
            out.push_back(std::move(e));
            ++num_calls_;
          }
        } else {
          emit(out, OutputEvent::CONTENT, buf_);
        }
        buf_.clear();
        return;
      }
    }
  }
}

}  // namespace spark
