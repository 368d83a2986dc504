// gemma4.cpp — Gemma 4's format, written in its special tokens:
//   <|channel>thought\nREASONING\n<channel|>          the reasoning (reasoning_content)
//   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>  a call, anywhere in the answer
// A VALUE is <|"|>text<|"|> (raw text, no escapes), a bare number, true / false,
// null (Python's None as the template prints it), {key:VALUE,...} or [VALUE,...]; keys are
// bare. Calls come back to back, one pair of tags each. The template writes a call whose
// arguments arrive as a JSON string as that string between the braces, so
// call:NAME{{"k": 1}} reads as JSON. <turn|> ends the answer, and <|tool_response> (the model
// handing over to a tool) does too; what follows either is not the model's answer.
// Calls are held to a grammar (engine/constrain/gemma_arguments.h): forced ones from the
// prompt's "<|tool_call>call:", under "auto" from the model's <|tool_call>. The markers are
// special tokens, which a constrained value never holds but for the grammar's own markers
// (<|"|> and the closing <tool_call|>, Grammar::markers): those are sampled as the tokens
// the model writes, and read back as their text.
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/check.h"
#include "web/chat_format/json_call.h"
#include "web/chat_format/think.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kThoughtHeader = "thought";
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kCallPrefix = "call:";
constexpr std::string_view kQuote = "<|\"|>";
constexpr std::string_view kTurnEnd = "<turn|>";
constexpr std::string_view kResponseOpen = "<|tool_response>";

// Arguments nest shallowly; deeper text is not a call we would hand to a client.
constexpr size_t kMaxDepth = 32;

// ---- reading one call ------------------------------------------------------------------------

// A recursive-descent reader of the argument notation over one call's body; each byte is
// read once, and nesting stops at kMaxDepth.
class ArgumentReader {
 public:
  explicit ArgumentReader(std::string_view text) : s_(text) {}

  // {key:VALUE,...} from `at` (at the '{'); `at` then past the '}'.
  bool object(J& out, size_t depth) {
    if (depth > kMaxDepth || !eat('{')) return false;
    out = J::object();
    if (eat('}')) return true;
    do {
      std::string key;
      if (!read_key(key) || !eat(':')) return false;
      J value;
      if (!read_value(value, depth)) return false;
      out[key] = std::move(value);
    } while (eat(','));
    return eat('}');
  }

  bool at_end() {
    at_ = skip_space(s_, at_);
    return at_ == s_.size();
  }
  size_t& at() { return at_; }

 private:
  bool eat(char c) {
    at_ = skip_space(s_, at_);
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  // <|"|>text<|"|>, raw.
  bool read_quoted(std::string& out) {
    const size_t end = s_.find(kQuote, at_ + kQuote.size());
    if (end == std::string_view::npos) return false;
    out = std::string(s_.substr(at_ + kQuote.size(), end - at_ - kQuote.size()));
    at_ = end + kQuote.size();
    return true;
  }

  // "text" with JSON's escapes.
  bool read_json_string(std::string& out) {
    size_t end = at_ + 1;
    while (end < s_.size() && s_[end] != '"') end += s_[end] == '\\' ? 2 : 1;
    if (end >= s_.size()) return false;
    J value = J::parse(s_.substr(at_, end + 1 - at_), nullptr, /*allow_exceptions=*/false);
    if (!value.is_string()) return false;
    out = value.get<std::string>();
    at_ = end + 1;
    return true;
  }

  bool read_key(std::string& key) {
    at_ = skip_space(s_, at_);
    if (s_.substr(at_).starts_with(kQuote)) return read_quoted(key);
    if (at_ < s_.size() && s_[at_] == '"') return read_json_string(key);
    const size_t colon = s_.find(':', at_);
    if (colon == std::string_view::npos) return false;
    const std::string_view bare = trim_space(s_.substr(at_, colon - at_));
    if (bare.empty() || bare.find_first_of("{}[],\n") != std::string_view::npos) return false;
    key = std::string(bare);
    at_ = colon;
    return true;
  }

  bool read_value(J& out, size_t depth) {
    at_ = skip_space(s_, at_);
    if (at_ == s_.size()) return false;
    std::string text;
    if (s_.substr(at_).starts_with(kQuote)) {
      if (!read_quoted(text)) return false;
      out = std::move(text);
      return true;
    }
    if (s_[at_] == '"') {
      if (!read_json_string(text)) return false;
      out = std::move(text);
      return true;
    }
    if (s_[at_] == '{') return object(out, depth + 1);
    if (s_[at_] == '[') return array(out, depth + 1);
    return bare(out);
  }

  bool array(J& out, size_t depth) {
    if (depth > kMaxDepth || !eat('[')) return false;
    out = J::array();
    if (eat(']')) return true;
    do {
      J value;
      if (!read_value(value, depth)) return false;
      out.push_back(std::move(value));
    } while (eat(','));
    return eat(']');
  }

  // A number, true / false, or null / None; any other word stays the text it is.
  bool bare(J& out) {
    const size_t end = s_.find_first_of(",}]", at_);
    const std::string_view word = trim_space(s_.substr(at_, end == std::string_view::npos ? end : end - at_));
    if (word.empty()) return false;
    at_ = end == std::string_view::npos ? s_.size() : end;
    if (word == "true" || word == "True") {
      out = true;
    } else if (word == "false" || word == "False") {
      out = false;
    } else if (word == "null" || word == "None") {
      out = nullptr;
    } else {
      out = J::parse(word, nullptr, /*allow_exceptions=*/false);
      if (!out.is_number()) out = std::string(word);
    }
    return true;
  }

  std::string_view s_;
  size_t at_ = 0;
};

// `call:NAME{...}`, the text between the call's tags; false when it is not a call.
bool read_gemma_call(std::string_view body, std::vector<ToolCall>& calls) {
  size_t at = skip_space(body, 0);
  if (!body.substr(at).starts_with(kCallPrefix)) return false;
  at += kCallPrefix.size();
  const size_t brace = body.find('{', at);
  if (brace == std::string_view::npos) return false;
  ToolCall call;
  call.name = std::string(trim_space(body.substr(at, brace - at)));
  if (call.name.empty() || call.name.find_first_of(" \n\t") != std::string::npos) return false;
  J arguments;
  // A JSON string's arguments, printed between the braces as they came.
  std::string_view rest = trim_space(body.substr(brace));
  std::string_view inner = rest.substr(1, rest.size() >= 2 ? rest.size() - 2 : 0);
  if (rest.size() >= 2 && rest.back() == '}' && trim_space(inner).substr(0, 1) == "{" &&
      json_depth(inner, kMaxDepth) <= kMaxDepth)
    arguments = J::parse(inner, nullptr, /*allow_exceptions=*/false);
  if (!arguments.is_object()) {
    ArgumentReader reader(body);
    reader.at() = brace;
    if (!reader.object(arguments, 1) || !reader.at_end()) return false;
  }
  call.id = new_tool_call_id();
  call.arguments = arguments.dump(-1, ' ', false, J::error_handler_t::replace);
  calls.push_back(std::move(call));
  return true;
}

// ---- the answer ------------------------------------------------------------------------------

// The first of marks[0..n) in buf: which, and where it starts; when none is
// whole, a suffix of buf that may begin one sets `partial` and `pos`.
struct Found {
  size_t pos = std::string::npos;
  int mark = -1;
  bool partial = false;
};

Found find_first(std::string_view buf, const std::string_view* marks, size_t n) {
  Found f;
  for (size_t i = 0; i < n; ++i) {
    const size_t pos = buf.find(marks[i]);
    if (pos < f.pos) f = {pos, int(i), false};
  }
  if (f.mark >= 0) return f;
  // Every mark begins with '<': only the last one in buf can start a partial mark.
  const size_t lt = buf.rfind('<');
  if (lt == std::string_view::npos) return f;
  const std::string_view tail = buf.substr(lt);
  for (size_t i = 0; i < n; ++i)
    if (tail.size() < marks[i].size() && marks[i].substr(0, tail.size()) == tail) return {lt, -1, true};
  return f;
}

// What ends plain answer text; the call's opening last, as it counts only when tools were offered.
constexpr std::string_view kAnswerMarks[] = {kChannelOpen, kTurnEnd, kResponseOpen, kCallOpen};
constexpr std::string_view kReasoningMarks[] = {kChannelClose};

class GemmaAnswer : public AnswerSplitter {
 public:
  explicit GemmaAnswer(bool tools) : tools_(tools) {}

  void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
    for (;;) {
      switch (mode_) {
        case Mode::CONTENT:
          if (!content(buf, final, out)) return;
          break;
        case Mode::HEADER:
          if (!header(buf, final)) return;
          break;
        case Mode::REASONING:
          if (!reasoning(buf, final, out)) return;
          break;
        case Mode::CALL:
          if (!call(buf, final, out)) return;
          break;
        case Mode::ENDED:
          buf.clear();
          return;
      }
    }
  }

 private:
  enum class Mode { CONTENT, HEADER, REASONING, CALL, ENDED };

  // Each step returns true when it changed mode (run goes on), false when it waits for text.
  bool content(std::string& buf, bool final, std::vector<OutputEvent>& out) {
    if (!strip_space(buf)) return false;
    const Found f = find_first(buf, kAnswerMarks, tools_ ? 4 : 3);
    if (f.mark < 0) {
      const size_t keep = f.partial && !final ? f.pos : buf.size();
      emit(out, OutputEvent::CONTENT, std::string_view(buf).substr(0, keep));
      buf.erase(0, keep);
      return false;
    }
    emit(out, OutputEvent::CONTENT, std::string_view(buf).substr(0, f.pos));
    const std::string_view mark = kAnswerMarks[f.mark];
    buf.erase(0, f.pos + mark.size());
    mode_ = mark == kChannelOpen ? Mode::HEADER : mark == kCallOpen ? Mode::CALL : Mode::ENDED;
    scanned_ = 0;
    in_quote_ = false;
    return true;
  }

  // The channel's name and its newline ("thought\n"), dropped once seen whole.
  bool header(std::string& buf, bool final) {
    const size_t n = std::min(buf.size(), kThoughtHeader.size());
    if (buf.compare(0, n, kThoughtHeader.substr(0, n)) != 0) {
      mode_ = Mode::REASONING;  // another channel's text: reasoning all the same
      return true;
    }
    if (buf.size() <= kThoughtHeader.size() && !final) return false;
    buf.erase(0, n);
    if (!buf.empty() && buf[0] == '\n') buf.erase(0, 1);
    mode_ = Mode::REASONING;
    return true;
  }

  // Up to <channel|>; the newline the template puts before it is not the reasoning's.
  bool reasoning(std::string& buf, bool final, std::vector<OutputEvent>& out) {
    const Found f = find_first(buf, kReasoningMarks, 1);
    size_t end = f.mark >= 0 || (f.partial && !final) ? f.pos : buf.size();
    size_t text_end = end;
    if (text_end > 0 && buf[text_end - 1] == '\n' && (f.mark >= 0 || !final)) --text_end;
    emit(out, OutputEvent::REASONING, std::string_view(buf).substr(0, text_end));
    if (f.mark < 0) {
      buf.erase(0, text_end);
      return false;
    }
    buf.erase(0, end + kChannelClose.size());
    mode_ = Mode::CONTENT;
    strip_leading_space_ = true;
    return true;
  }

  // Up to <tool_call|> outside the <|"|> strings (their text is raw and may hold anything),
  // byte by byte from where the last push stopped.
  bool call(std::string& buf, bool final, std::vector<OutputEvent>& out) {
    auto partial = [](std::string_view rest, std::string_view mark) {
      return rest.size() < mark.size() && mark.substr(0, rest.size()) == rest;
    };
    for (size_t i = scanned_; i < buf.size(); ++i) {
      if (buf[i] != '<') continue;
      const std::string_view rest = std::string_view(buf).substr(i);
      if (rest.starts_with(kQuote)) {
        in_quote_ = !in_quote_;
        i += kQuote.size() - 1;
      } else if (!in_quote_ && rest.starts_with(kCallClose)) {
        end_call(buf, out, i, true);
        return true;
      } else if (!final && (partial(rest, kQuote) || partial(rest, kCallClose))) {
        scanned_ = i;
        return false;
      }
    }
    scanned_ = buf.size();
    if (!final) return false;
    end_call(buf, out, buf.size(), false);  // unclosed: whole if it reads as a call
    return true;
  }

  void end_call(std::string& buf, std::vector<OutputEvent>& out, size_t body_len, bool closed) {
    const std::string_view body(buf.data(), body_len);
    std::vector<ToolCall> calls;
    if (read_gemma_call(body, calls)) {
      emit_calls(out, calls);
    } else {  // not a call after all: the client sees exactly what the model wrote
      emit(out, OutputEvent::CONTENT,
           std::string(kCallOpen) + std::string(body) + (closed ? std::string(kCallClose) : std::string()));
    }
    buf.erase(0, closed ? body_len + kCallClose.size() : buf.size());
    mode_ = Mode::CONTENT;
    strip_leading_space_ = true;
  }

  bool tools_;
  Mode mode_ = Mode::CONTENT;
  size_t scanned_ = 0;     // CALL: bytes of the body already searched
  bool in_quote_ = false;  // CALL: the scan is inside a <|"|> string
};

class Gemma4 : public ChatFormat {
  const char* name() const override { return "gemma4"; }
  bool detect(const TemplateText& text) const override {
    return text.with_tools.find(kCallOpen) != std::string::npos && text.with_tools.find(kQuote) != std::string::npos;
  }
  bool reads_special_tokens() const override { return true; }
  std::optional<ForcedCall> force_call(const J& tools, const std::string* named) const override {
    ForcedCall f;
    f.prefill = std::string(kCallOpen) + std::string(kCallPrefix) + (named ? *named : "");
    f.rest = call_spec(tools, "", named);
    return f;
  }
  std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const J& tools, const std::shared_ptr<const constrain::TokenTable>& table) const override {
    auto trigger = std::make_shared<constrain::ToolTrigger>();
    trigger->format = constrain::ToolTrigger::Format::TAG;
    trigger->opening = std::string(kCallOpen);
    trigger->call = constrain::compile_constraint(call_spec(tools, std::string(kCallPrefix), nullptr), table);
    return trigger;
  }
  // The call after `before_name`: each declared function's name (unless `named`), its
  // arguments, and the closing tag.
  static constrain::ConstraintSpec call_spec(const J& tools, const std::string& before_name, const std::string* named) {
    constrain::ConstraintSpec s;
    s.kind = constrain::ConstraintSpec::Kind::GEMMA_TOOL_CALL;
    s.closing = std::string(kCallClose);
    for (const auto& t : tools) {
      const J& fn = t["function"];
      const std::string name = fn["name"].get<std::string>();
      if (named && name != *named) continue;
      if (name.empty() || name.find_first_of("{ \n\t\r") != std::string::npos)
        throw InputError("tool call: Gemma 4's notation cannot write the function name '" + name +
                         "' ('{' or whitespace)");
      s.tools.emplace_back(named ? "" : before_name + name, function_parameters(fn).dump());
    }
    return s;
  }
  // The channel is read here, whatever `reasoning` says: its tokens cannot be anything else.
  std::unique_ptr<OutputParser> make_parser(const OutputParserOptions& options) const override {
    OutputParserOptions answer_only = options;
    answer_only.reasoning = false;
    return think_then(answer_only, std::make_unique<GemmaAnswer>(options.tools));
  }
};

}  // namespace

const ChatFormat& gemma4_chat_format() {
  static const Gemma4 format;
  return format;
}

}  // namespace spark
