// test_bench_prompts.cpp — random prompts hit the counted length (shared prefix included),
// are reproducible from the seed, fall back to an estimate; JSONL datasets and their errors;
// the request body; URL and flag validation.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "engine/util/check.h"
#include "web/bench/bench_client.h"
#include "web/bench/bench_options.h"
#include "web/bench/bench_prompts.h"

using namespace spark;

namespace {

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A tokenizer with a BOS token where words starting with 's' take two tokens: the word
// count alone cannot predict the length, so the search has to use the counts.
struct FakeTokenizer {
  int calls = 0;
  std::optional<long long> operator()(const std::string& text) {
    ++calls;
    long long n = 1;
    for (const auto& w : split_words(text)) n += w[0] == 's' ? 2 : 1;
    return n;
  }
};

std::string write_temp(const std::string& name, const std::string& content) {
  std::string path = "/tmp/sparkd_test_" + name + "_" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(path) << content;
  return path;
}

}  // namespace

TEST_CASE("random prompts: counted lengths hit the target, mostly exactly") {
  FakeTokenizer tok;
  TokenCounter counter = [&](const std::string& t) { return tok(t); };
  PromptSet set = random_prompts(40, 100, 0, 1, counter);
  REQUIRE(set.prompts.size() == 40);
  CHECK(set.counted);
  int exact = 0;
  for (const auto& p : set.prompts) {
    CHECK(p.tokens == *tok(p.text));  // the recorded count is the tokenizer's
    CHECK(p.tokens <= 100);
    CHECK(p.tokens >= 99);  // only a two-token word at the boundary can miss, by one
    exact += p.tokens == 100;
  }
  CHECK(exact >= 20);
  CHECK(tok.calls < 40 * 8);
  // Prompts differ from each other.
  CHECK(set.prompts[0].text != set.prompts[1].text);
}

TEST_CASE("random prompts: the same seed gives the same text; another seed another") {
  PromptSet a = random_prompts(3, 20, 0, 42, nullptr);
  PromptSet b = random_prompts(3, 20, 0, 42, nullptr);
  PromptSet c = random_prompts(3, 20, 0, 43, nullptr);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(a.prompts[i].text == b.prompts[i].text);
    CHECK(a.prompts[i].text != c.prompts[i].text);
  }
}

TEST_CASE("random prompts: a shared prefix is the same leading text in every prompt") {
  FakeTokenizer tok;
  TokenCounter counter = [&](const std::string& t) { return tok(t); };
  PromptSet set = random_prompts(5, 30, 50, 3, counter);
  CHECK(set.prefix_tokens >= 49);
  CHECK(set.prefix_tokens <= 50);
  std::vector<std::string> first = split_words(set.prompts[0].text);
  std::vector<std::string> second = split_words(set.prompts[1].text);
  size_t common = 0;
  while (common < first.size() && common < second.size() && first[common] == second[common]) ++common;
  // The prefix (about 50 tokens, so at least 25 words) is shared; the rest is not.
  CHECK(common >= 25);
  CHECK(common < first.size());
  for (const auto& p : set.prompts) {
    CHECK(p.tokens <= 80);
    CHECK(p.tokens >= 79);
  }
}

TEST_CASE("random prompts: without a counter the length is one token per word") {
  PromptSet set = random_prompts(2, 64, 16, 0, nullptr);
  CHECK_FALSE(set.counted);
  CHECK(set.length_note.find("estimated") != std::string::npos);
  for (const auto& p : set.prompts) {
    CHECK(split_words(p.text).size() == 80);
    CHECK(p.tokens == 80);
  }
  // Every built-in word is a plain lowercase word (no spaces that would break the count).
  for (const char* w : bench_words()) CHECK(split_words(w).size() == 1);
}

TEST_CASE("dataset: prompts and messages in order, reused from the top, with max_tokens") {
  std::string path = write_temp("ok",
                                "{\"prompt\": \"hello there\", \"max_tokens\": 5}\n"
                                "\n"
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  PromptSet set = dataset_prompts(path, 5, true, nullptr);
  REQUIRE(set.prompts.size() == 5);
  CHECK(set.prompts[0].text == "hello there");
  CHECK(set.prompts[0].max_tokens == 5);
  CHECK(set.prompts[1].messages.is_array());
  CHECK_FALSE(set.prompts[1].max_tokens.has_value());
  CHECK(set.prompts[2].text == "hello there");
  CHECK(dataset_prompts(path, 0, true, nullptr).prompts.size() == 2);
  std::remove(path.c_str());
}

TEST_CASE("dataset: bad lines are input errors naming file and line") {
  struct Bad {
    const char* content;
    const char* message;
  } cases[] = {
      {"{\"prompt\": \"a\"}\nnot json\n", ":2: not a JSON object"},
      {"{\"text\": \"a\"}\n", ":1: expected \"prompt\" or \"messages\""},
      {"{\"prompt\": 3}\n", "non-empty string"},
      {"{\"prompt\": \"a\", \"max_tokens\": 0}\n", "positive integer"},
      {"{\"messages\": [{\"content\": \"x\"}]}\n", "needs a \"role\""},
      {"\n\n", "has no prompts"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.content);
    std::string path = write_temp("bad", b.content);
    try {
      dataset_prompts(path, 0, true, nullptr);
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(b.message) != std::string::npos);
    }
    std::remove(path.c_str());
  }
  std::string path = write_temp("msgs", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n");
  CHECK_THROWS_WITH_AS(dataset_prompts(path, 0, false, nullptr), doctest::Contains("--endpoint chat"), InputError);
  std::remove(path.c_str());
  CHECK_THROWS_AS(dataset_prompts("/nonexistent/prompts.jsonl", 0, false, nullptr), InputError);
}

TEST_CASE("request body: streaming with usage, ignore_eos, max_tokens from the line or the flag") {
  BenchPrompt p;
  p.text = "hello";
  nlohmann::json c = request_body(BenchEndpoint::COMPLETIONS, "m", p, 64);
  CHECK(c["prompt"] == "hello");
  CHECK(c["max_tokens"] == 64);
  CHECK(c["stream"] == true);
  CHECK(c["stream_options"]["include_usage"] == true);
  CHECK(c["ignore_eos"] == true);
  CHECK_FALSE(c.contains("messages"));
  p.max_tokens = 7;
  nlohmann::json chat = request_body(BenchEndpoint::CHAT, "m", p, 64);
  CHECK(chat["max_tokens"] == 7);
  CHECK(chat["messages"] == nlohmann::json::parse(R"([{"role":"user","content":"hello"}])"));
  CHECK_FALSE(chat.contains("prompt"));
}

TEST_CASE("target URLs: origin and path prefix; a trailing /v1 is dropped") {
  BenchTarget t = parse_target("http://127.0.0.1:8000", "", 10);
  CHECK(t.origin == "http://127.0.0.1:8000");
  CHECK(t.base_path == "");
  CHECK(parse_target("http://h:1/v1/", "", 10).base_path == "");
  CHECK(parse_target("https://h/api/v1", "", 10).base_path == "/api");
  CHECK(parse_target("https://h/api/v1", "", 10).origin == "https://h");
  CHECK_THROWS_AS(parse_target("127.0.0.1:8000", "", 10), InputError);
  CHECK_THROWS_AS(parse_target("ftp://h", "", 10), InputError);
  CHECK_THROWS_AS(parse_target("http:///x", "", 10), InputError);
}

TEST_CASE("bench flags: defaults, and each contradiction or bad value is an input error") {
  BenchOptions o = parse_bench_options({"--url", "http://h:1"});
  CHECK(o.concurrency == 1);
  CHECK_FALSE(o.poisson());
  CHECK(o.num_prompts == 100);
  CHECK(o.endpoint == BenchEndpoint::COMPLETIONS);
  BenchOptions rate = parse_bench_options({"--url", "http://h:1", "--request-rate", "2.5"});
  CHECK(rate.poisson());
  CHECK(rate.concurrency == 0);
  BenchOptions both = parse_bench_options({"--url", "http://h:1", "--request-rate", "2", "--concurrency", "4"});
  CHECK(both.concurrency == 4);
  CHECK(parse_bench_options({"--url", "http://h:1", "--dataset", "f.jsonl"}).num_prompts == 0);
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"--url", "http://h:1", "--concurrency", "0"},
      {"--url", "http://h:1", "--request-rate", "0"},
      {"--url", "http://h:1", "--request-rate", "fast"},
      {"--url", "http://h:1", "--endpoint", "embeddings"},
      {"--url", "http://h:1", "--num-prompts", "0"},
      {"--url", "http://h:1", "--input-len", "0"},
      {"--url", "http://h:1", "--prefix-len", "-1"},
      {"--url", "http://h:1", "--timeout", "0"},
      {"--url", "http://h:1", "--dataset", "f.jsonl", "--input-len", "5"},
      {"--url", "http://h:1", "--bogus", "1"},
  };
  for (const auto& args : bad) {
    CAPTURE(args.size() > 2 ? args[2] : std::string("(none)"));
    CHECK_THROWS_AS(parse_bench_options(args), InputError);
  }
}
