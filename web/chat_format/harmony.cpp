// harmony.cpp — gpt-oss's harmony format: output split, as it streams, into OpenAI's
// reasoning_content (the analysis channel), content (final, and commentary addressed to no
// one) and tool_calls (messages addressed to=functions.NAME). Output that is not harmony,
// or that breaks off, is returned as content: nothing the model wrote is lost. The text
// must carry harmony's special tokens (<|channel|>, <|message|>, <|end|>, ...) as they
// decode; the prompt ends with "<|start|>assistant", so the output begins with a header.
#include <algorithm>
#include <string>

#include "web/chat_format/chat_format.h"
#include "web/chat_format/json_call.h"

namespace spark {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|return|>", "<|call|>"};
constexpr std::string_view kFunctions = "functions.";

// The word after `key` in a header ("<|channel|>analysis", " to=functions.f"): up to a
// space or the next special token.
std::string header_word(std::string_view header, std::string_view key) {
  size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view rest = header.substr(at + key.size());
  return std::string(rest.substr(0, std::min(rest.find(' '), rest.find("<|"))));
}

// Length of the longest suffix of `buf` that is a proper prefix of one of `tags`.
size_t partial_tag(std::string_view buf, std::initializer_list<std::string_view> tags) {
  size_t best = 0;
  for (std::string_view tag : tags)
    for (size_t len = std::min(tag.size() - 1, buf.size()); len > best; --len)
      if (buf.substr(buf.size() - len) == tag.substr(0, len)) {
        best = len;
        break;
      }
  return best;
}

// Linear in the text.
class HarmonyParser : public OutputParser {
 private:
  std::vector<OutputEvent> on_push(std::string_view delta) override {
    std::vector<OutputEvent> out;
    buf_.append(delta);
    run(out, false, false);
    return out;
  }
  // stopped: the answer ended on a stop token (<|return|>, <|call|>) that generation does
  // not hand on as text, so the open message is whole (a call is a call); otherwise it
  // was cut off.
  std::vector<OutputEvent> on_finish(bool stopped) override {
    std::vector<OutputEvent> out;
    run(out, true, stopped);
    return out;
  }

  enum class Mode { HEADER, BODY, EXPECT_START, RAW };

  void open_body(std::string_view header) {
    const std::string channel = header_word(header, kChannel);
    std::string recipient = header_word(header, " to=");
    if (recipient.empty() && header.rfind("to=", 0) == 0) recipient = header_word(" " + std::string(header), " to=");
    body_is_call_ = !recipient.empty();
    call_name_ = recipient.rfind(kFunctions, 0) == 0 ? recipient.substr(kFunctions.size()) : recipient;
    call_args_.clear();
    body_kind_ = channel == "analysis" ? OutputEvent::REASONING : OutputEvent::CONTENT;
    mode_ = Mode::BODY;
  }

  void emit_body(std::vector<OutputEvent>& out, std::string_view text) {
    if (text.empty()) return;
    if (body_is_call_) {
      call_args_.append(text);
    } else if (!out.empty() && out.back().kind == body_kind_) {
      out.back().text.append(text);
    } else {
      out.push_back({body_kind_, std::string(text), {}});
    }
  }

  void end_body(std::vector<OutputEvent>& out, bool complete) {
    if (body_is_call_) {
      if (complete) {
        OutputEvent e{OutputEvent::TOOL_CALL, "", {new_tool_call_id(), call_name_, call_args_}};
        out.push_back(std::move(e));
      } else {  // a call cut off is not a call a client could run: hand back its text
        body_is_call_ = false;
        body_kind_ = OutputEvent::CONTENT;
        emit_body(out, call_args_);
      }
    }
    body_is_call_ = false;
    call_args_.clear();
  }

  void run(std::vector<OutputEvent>& out, bool final, bool stopped) {
    for (;;) {
      switch (mode_) {
        case Mode::RAW:
          if (!buf_.empty()) out.push_back({OutputEvent::CONTENT, std::move(buf_), {}});
          buf_.clear();
          return;
        case Mode::HEADER: {
          // A first header must start like one; anything else is not harmony at all.
          if (first_header_ && !buf_.empty() && buf_[0] != '<' && buf_[0] != ' ' && buf_.rfind("to=", 0) != 0) {
            mode_ = Mode::RAW;
            continue;
          }
          const size_t at = buf_.find(kMessage);
          if (at == std::string::npos) {
            if (final) {
              // Plain text never opened a message: it is the answer. A cut-off header is dropped.
              if (buf_.find("<|") == std::string::npos) mode_ = Mode::RAW;
              else buf_.clear();
              if (mode_ == Mode::RAW) continue;
            }
            return;
          }
          first_header_ = false;
          open_body(std::string_view(buf_).substr(0, at));
          buf_.erase(0, at + kMessage.size());
          continue;
        }
        case Mode::BODY: {
          size_t end = std::string::npos, len = 0;
          for (std::string_view tag : kEnds) {
            size_t p = buf_.find(tag);
            if (p < end) {
              end = p;
              len = tag.size();
            }
          }
          if (end == std::string::npos) {
            const size_t keep = final ? 0 : partial_tag(buf_, {kEnds[0], kEnds[1], kEnds[2]});
            emit_body(out, std::string_view(buf_).substr(0, buf_.size() - keep));
            buf_.erase(0, buf_.size() - keep);
            if (final) end_body(out, stopped);
            return;
          }
          emit_body(out, std::string_view(buf_).substr(0, end));
          buf_.erase(0, end + len);
          end_body(out, true);
          mode_ = Mode::EXPECT_START;
          continue;
        }
        case Mode::EXPECT_START: {
          if (buf_.rfind(kStart, 0) == 0) {
            buf_.erase(0, kStart.size());
            mode_ = Mode::HEADER;
            continue;
          }
          // Still possibly the start token, or nothing more: wait. Anything else after a
          // message ends is not harmony: the rest is content.
          if (buf_.empty() || (kStart.substr(0, buf_.size()) == buf_ && !final)) return;
          if (final && kStart.substr(0, buf_.size()) == buf_) {
            buf_.clear();
            return;
          }
          mode_ = Mode::RAW;
          continue;
        }
      }
    }
  }

  Mode mode_ = Mode::HEADER;
  std::string buf_;  // undecided text
  bool first_header_ = true;
  OutputEvent::Kind body_kind_ = OutputEvent::CONTENT;
  bool body_is_call_ = false;
  std::string call_name_, call_args_;
};

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

// Calls are headed `to=functions.NAME`, then <|message|>; the message is NAME's arguments
// (the name sits among special tokens a grammar cannot hold, so it is not constrained).
class Harmony : public ChatFormat {
  const char* name() const override { return "harmony"; }
  bool detect(const TemplateText& text) const override {
    return contains(text.with_tools, kChannel) && contains(text.with_tools, kMessage);
  }
  bool reads_special_tokens() const override { return true; }
  std::optional<ForcedCall> force_call(const nlohmann::ordered_json&, const std::string*) const override {
    return std::nullopt;  // the call opens in a header of special tokens
  }
  std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const nlohmann::ordered_json& tools, const std::shared_ptr<const constrain::TokenTable>& table) const override {
    auto trigger = std::make_shared<constrain::ToolTrigger>();
    trigger->format = constrain::ToolTrigger::Format::HEADER;
    trigger->opening = "to=" + std::string(kFunctions);
    trigger->header_end = std::string(kMessage);
    for (const auto& t : tools) {
      constrain::ConstraintSpec s;
      s.kind = constrain::ConstraintSpec::Kind::JSON_SCHEMA;
      s.schema = function_parameters(t["function"]).dump();
      trigger->arguments.emplace_back(t["function"]["name"].get<std::string>(),
                                      constrain::compile_constraint(s, table));
    }
    return trigger;
  }
  std::unique_ptr<OutputParser> make_parser(const OutputParserOptions&) const override {
    return std::make_unique<HarmonyParser>();
  }
};

}  // namespace

const ChatFormat& harmony_chat_format() {
  static const Harmony format;
  return format;
}

}  // namespace spark
