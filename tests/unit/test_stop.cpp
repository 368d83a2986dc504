// test_stop.cpp — stop strings across token boundaries, held-back text, stop tokens,
// EOS, min_tokens and max_tokens.
#include <doctest/doctest.h>

#include "engine/core/stop.h"

using namespace spark;

namespace {

// Feeds deltas one by one and returns what was emitted after each.
std::vector<std::string> feed(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::vector<std::string> out;
  for (const auto& d : deltas) out.push_back(m.push(d));
  return out;
}

}  // namespace

TEST_CASE("stop strings: a match spanning three deltas cuts the text before it") {
  StopStringMatcher m({"###"});
  CHECK(feed(m, {"ab#", "#", "#cd"}) == std::vector<std::string>{"ab", "", ""});
  CHECK(m.matched());
  CHECK(m.matched_stop() == std::string("###"));
  CHECK(m.push("more") == "");
  CHECK(m.flush() == "");
}

TEST_CASE("stop strings: held-back text is released once it cannot start a match") {
  StopStringMatcher m({"###"});
  CHECK(feed(m, {"a#", "#b", "c"}) == std::vector<std::string>{"a", "##b", "c"});
  CHECK_FALSE(m.matched());
  CHECK(m.push("x##") == "x");
  CHECK(m.flush() == "##");  // the sequence ended for another reason
}

TEST_CASE("stop strings: the earliest match wins among several") {
  StopStringMatcher m({"world", "lo w", "\n"});
  CHECK(m.push("hel") == "he");  // "l" could start "lo w"
  CHECK(m.push("lo world") == "l");  // "hel" in all: the text before "lo w"
  CHECK(m.matched_stop() == std::string("lo w"));
}

TEST_CASE("stop strings: a match inside one delta and text after it is dropped") {
  StopStringMatcher m({"STOP"});
  CHECK(m.push("okSTOPtrailing") == "ok");
  CHECK(m.matched());
}

TEST_CASE("stop strings: multi-byte characters are never split by the hold-back") {
  StopStringMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  CHECK(m.push("caf\xC3\xA9") == "caf");       // "é" could start the stop string
  CHECK(m.push("!") == "\xC3\xA9!");
}

TEST_CASE("stop strings: no stop strings pass text straight through") {
  StopStringMatcher m({});
  CHECK(m.push("abc") == "abc");
  CHECK(m.flush() == "");
}

TEST_CASE("stop checker: EOS, stop_token_ids, ignore_eos, min_tokens, max_tokens") {
  SamplingParams p;
  p.stop_token_ids = {7};
  StopChecker c(p, {2}, 5);
  auto v = c.on_token(2, 1);
  CHECK(v.finished);
  CHECK(v.reason == FinishReason::STOP);
  CHECK(v.hide_text);
  CHECK_FALSE(v.stop_token.has_value());  // EOS is not reported as a stop token
  v = c.on_token(7, 1);
  CHECK(v.finished);
  CHECK(v.stop_token == 7);
  CHECK_FALSE(c.on_token(3, 4).finished);
  v = c.on_token(3, 5);
  CHECK(v.finished);
  CHECK(v.reason == FinishReason::LENGTH);
  CHECK_FALSE(v.hide_text);

  p.ignore_eos = true;
  StopChecker ignoring(p, {2}, 5);
  CHECK_FALSE(ignoring.on_token(2, 1).finished);
  CHECK(ignoring.on_token(7, 1).finished);  // stop_token_ids still count

  SamplingParams m;
  m.min_tokens = 3;
  m.stop = {"x"};
  StopChecker min(m, {2}, 10);
  CHECK_FALSE(min.on_token(2, 2).finished);
  CHECK(min.on_token(2, 3).finished);
  CHECK(min.on_text("axb", 2) == "axb");  // before min_tokens stop strings do not apply
  CHECK_FALSE(min.stopped_by_string());
  CHECK(min.on_text("cxd", 3) == "c");
  CHECK(min.stopped_by_string());
}
