// test_turn.cpp — one request's lifecycle (web/turn.h) driven without HTTP: a real engine
// over a scripted backend (each sequence's k-th output token is fixed), a one-character
// tokenizer, a fake client link and a framer that records what it is handed. Choices per
// prompt, parsed tool calls, echo, usage, and a client that goes away.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/server.h"
#include "web/turn.h"

using namespace spark;

namespace {

using J = nlohmann::ordered_json;

// Printable ASCII is ids 0..94 (id = char - 32); 95 is the end of a sequence.
constexpr int64_t kVocab = 96;
constexpr int32_t kEos = 95;

std::unique_ptr<Tokenizer> char_tokenizer() {
  J vocab = J::object();
  for (int c = 32; c < 127; ++c) vocab[std::string(1, char(c))] = c - 32;
  vocab["<eos>"] = kEos;
  J tok{{"version", "1.0"},
        {"added_tokens", J::array({J{{"id", kEos}, {"content", "<eos>"}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", nullptr},
        {"post_processor", nullptr},
        {"decoder", J{{"type", "Fuse"}}},
        {"model", J{{"type", "BPE"}, {"vocab", vocab}, {"merges", J::array()}}}};
  return Tokenizer::from_json_text(tok.dump(), R"({"eos_token": "<eos>"})");
}

// Every logits row picks script[k] for a sequence's k-th output token (k counted from the
// row's position past the prompt), then EOS.
class ScriptBackend : public Backend {
 public:
  ScriptBackend(std::string script, int32_t prompt_len, std::chrono::milliseconds step_time)
      : script_(std::move(script)), prompt_len_(prompt_len), step_time_(step_time) {}
  std::string describe() const override { return "script"; }
  LayerRange layers() const override { return {0, 1}; }
  size_t kv_block_bytes(int64_t block_size) const override { return size_t(block_size); }
  void init_kv_cache(int64_t, int64_t) override {}
  void forward(const Batch& b, const float*, ForwardResult& out) override {
    std::this_thread::sleep_for(step_time_);
    out.logits.assign(b.logits_rows.size() * kVocab, 0.0f);
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const int32_t k = b.positions[size_t(b.logits_rows[r])] + 1 - prompt_len_;
      const int32_t token = k >= 0 && size_t(k) < script_.size() ? script_[size_t(k)] - 32 : kEos;
      out.logits[r * kVocab + size_t(token)] = 10.0f;
    }
  }

 private:
  std::string script_;
  int32_t prompt_len_;
  std::chrono::milliseconds step_time_;
};

class FakeClient : public ClientLink {
 public:
  explicit FakeClient(std::atomic<bool>& gone) : gone_(gone) {}
  bool closed() const override { return gone_.load(); }

 private:
  std::atomic<bool>& gone_;
};

// What the turn handed to the framer, in order.
class RecordingFramer : public TurnFramer {
 public:
  explicit RecordingFramer(std::vector<std::string>& log) : log_(log) {}
  void open(const Turn&, std::string*) override { log_.push_back("open"); }
  void output(const Turn&, const ChoiceDelta& d, std::string*) override {
    for (const auto& e : d.events)
      log_.push_back("out " + std::to_string(d.choice) + " " +
                     (e.kind == OutputEvent::TOOL_CALL ? "call " + e.call.name : e.text));
  }
  void choice_done(const Turn&, size_t choice, std::string*) override { log_.push_back("done " + std::to_string(choice)); }
  void close(const Turn&, std::string*) override { log_.push_back("close"); }
  void fail(const Turn&, const HttpError& e, std::string&) override { log_.push_back("fail " + std::to_string(e.status)); }
  J whole(const Turn&) override { return J::object(); }

 private:
  std::vector<std::string>& log_;
};

struct Rig {
  Config config;
  ServerState state;
  std::unique_ptr<Tokenizer> tokenizer = char_tokenizer();
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<App> app;
  std::unique_ptr<Engine> engine;

  Rig(const std::string& script, int32_t prompt_len, std::chrono::milliseconds step_time = {}) {
    config.engine.block_size = 4;
    config.engine.max_num_seqs = 8;
    config.server.request_timeout_s = 60;
    http = std::make_unique<HttpServer>(config.server, state);
    app.reset(new App{config, state, *http, "m"});
    ModelSpec spec;
    spec.vocab_size = kVocab;
    spec.max_position_embeddings = 256;
    spec.eos_token_ids = {kEos};
    engine = std::make_unique<Engine>(config, std::make_unique<ScriptBackend>(script, prompt_len, step_time), spec, *tokenizer, 64);
    engine->start();
    app->engine = engine.get();
    app->tokenizer = tokenizer.get();
  }
  ~Rig() { engine->stop(); }
};

ApiRequest plain_request(int64_t n) {
  ApiRequest r;
  r.kind = ApiKind::COMPLETION;
  r.n = n;
  r.params.temperature = 0;
  r.params.max_tokens = 32;
  return r;
}

std::optional<HttpError> drive(Turn& turn) {
  std::optional<HttpError> failure;
  for (int i = 0; i < 3000 && turn.step(nullptr, failure); ++i) {
  }
  return failure;
}

}  // namespace

TEST_CASE("turn: n choices per prompt, echo, usage, one close") {
  Rig rig("hi!", 3);
  std::vector<std::string> log;
  std::atomic<bool> gone{false};
  TurnPrompt prompt;
  prompt.param = "prompt";
  prompt.ids = {rig.tokenizer->encode("abc", false, false), rig.tokenizer->encode("xyz", false, false)};
  prompt.echo = {"abc", "xyz"};
  Turn turn(*rig.app, plain_request(2), "t1", std::move(prompt), std::make_unique<RecordingFramer>(log),
            std::make_unique<FakeClient>(gone));
  CHECK(!drive(turn));
  REQUIRE(turn.num_choices() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(turn.results()[i].text == (i < 2 ? "abchi!" : "xyzhi!"));
    CHECK(turn.results()[i].finish == FinishReason::STOP);
  }
  const Usage u = turn.usage();
  CHECK(u.prompt_tokens == 6);
  CHECK(u.completion_tokens == 4 * 4);  // three characters and EOS per choice
  CHECK(log.front() == "open");
  CHECK(log.back() == "close");
  CHECK(std::count(log.begin(), log.end(), "close") == 1);
  for (const char* done : {"done 0", "done 1", "done 2", "done 3"}) CHECK(std::count(log.begin(), log.end(), done) == 1);
}

TEST_CASE("turn: a chat answer is parsed into a tool call") {
  const std::string call = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>";
  Rig rig(call, 2);
  std::vector<std::string> log;
  std::atomic<bool> gone{false};
  TurnPrompt prompt;
  prompt.ids = {rig.tokenizer->encode("q?", false, false)};
  prompt.parser = OutputParserOptions{find_chat_format("hermes"), true, false, false};
  ApiRequest r = plain_request(1);
  r.kind = ApiKind::CHAT;
  r.params.max_tokens = 100;
  Turn turn(*rig.app, std::move(r), "t2", std::move(prompt), std::make_unique<RecordingFramer>(log),
            std::make_unique<FakeClient>(gone));
  CHECK(!drive(turn));
  REQUIRE(turn.result().tool_calls.size() == 1);
  CHECK(turn.result().tool_calls[0].name == "f");
  CHECK(J::parse(turn.result().tool_calls[0].arguments) == J{{"x", 1}});
  CHECK(turn.result().text.empty());
  CHECK(std::count(log.begin(), log.end(), "out 0 call f") == 1);
}

TEST_CASE("turn: a client that goes away ends the turn with 499 and gives its sequences back") {
  // 200 steps of at least 1 ms: the answer is far from done when the client leaves.
  Rig rig(std::string(200, 'z'), 1, std::chrono::milliseconds(1));
  std::vector<std::string> log;
  std::atomic<bool> gone{false};
  TurnPrompt prompt;
  prompt.ids = {rig.tokenizer->encode("a", false, false)};
  ApiRequest r = plain_request(3);
  r.params.max_tokens = 200;
  auto turn = std::make_unique<Turn>(*rig.app, std::move(r), "t3", std::move(prompt),
                                     std::make_unique<RecordingFramer>(log), std::make_unique<FakeClient>(gone));
  std::optional<HttpError> failure;
  REQUIRE(turn->step(nullptr, failure));
  gone = true;
  failure = drive(*turn);
  REQUIRE(failure);
  CHECK(failure->status == 499);
  CHECK(std::count(log.begin(), log.end(), "close") == 0);
  CHECK(rig.app->sequences_in_flight.load() == 3);  // the admission is held while the turn lives
  turn.reset();
  CHECK(rig.app->sequences_in_flight.load() == 0);
}
