// output_events.h — what the output-parser tests share: an answer's events gathered into
// content, reasoning and calls, parsed whole or in deltas of any size, and the check that
// every split of a text into deltas reads it the same.
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "web/chat_format/chat_format.h"

namespace spark::testing {

struct Parsed {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

inline Parsed collect(const std::vector<OutputEvent>& events, Parsed p = {}) {
  for (const auto& e : events) {
    if (e.kind == OutputEvent::CONTENT) p.content += e.text;
    else if (e.kind == OutputEvent::REASONING) p.reasoning += e.text;
    else p.calls.push_back(e.call);
  }
  return p;
}

inline Parsed parse_whole(const std::string& text, const OutputParserOptions& opt) {
  auto parser = make_output_parser(opt);
  Parsed p = collect(parser->push(text));
  return collect(parser->finish(), p);
}

// The same text cut into deltas of `step` bytes.
inline Parsed parse_in_steps(const std::string& text, const OutputParserOptions& opt, size_t step) {
  auto parser = make_output_parser(opt);
  Parsed p;
  for (size_t i = 0; i < text.size(); i += step) p = collect(parser->push(text.substr(i, step)), p);
  return collect(parser->finish(), p);
}

inline OutputParserOptions with_tools(const char* format) {
  OutputParserOptions o;
  o.format = find_chat_format(format);
  REQUIRE(o.format);
  o.tools = true;
  return o;
}

// Every delta size gives the same split as the whole text.
inline void check_all_splits(const std::string& text, const OutputParserOptions& opt) {
  Parsed whole = parse_whole(text, opt);
  for (size_t step = 1; step <= text.size(); ++step) {
    Parsed p = parse_in_steps(text, opt, step);
    CAPTURE(step);
    CHECK(p.content == whole.content);
    CHECK(p.reasoning == whole.reasoning);
    REQUIRE(p.calls.size() == whole.calls.size());
    for (size_t i = 0; i < p.calls.size(); ++i) {
      CHECK(p.calls[i].name == whole.calls[i].name);
      CHECK(p.calls[i].arguments == whole.calls[i].arguments);
    }
  }
}

}  // namespace spark::testing
