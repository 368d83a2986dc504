// test_peer_messages.cpp — the peer protocol's frames and payloads: round trips, and
// every malformed input refused with InputError (never a crash, never a partial accept).
#include <doctest/doctest.h>

#include <cmath>

#include "engine/peer/frame.h"
#include "engine/peer/messages.h"
#include "engine/peer/socket.h"
#include "engine/peer/wire.h"

using namespace spark;

namespace {

Welcome session() {
  Welcome w;
  w.session = 7;
  w.kv_blocks = 8;
  w.window_blocks = 6;  // blocks 6 and 7 hold the full-attention layers' K and V only
  w.block_size = 4;
  w.max_step_tokens = 32;
  w.max_step_seqs = 4;
  w.max_model_len = 32;
  w.vocab_size = 100;
  w.hidden_size = 8;
  w.eos_token_ids = {2};
  return w;
}

// Two sequences: a 3-token prefill chunk at positions 0..2 (blocks 5) and one decode
// token at position 5 (blocks 1, 3).
MicroBatchPlan plan() {
  MicroBatchPlan p;
  p.id = 42;
  p.closes = {9};
  SeqOpen o;
  o.seq_id = 1;
  o.num_prompt_tokens = 3;
  o.seed = 123;
  o.params.temperature = 0.7;
  o.params.top_k = 5;
  o.params.logit_bias = {{4, 1.5f}};
  o.params.logprobs = true;
  o.params.top_logprobs = 2;
  o.params.stop_token_ids = {11};
  o.tokens = {10, 11, 12};
  p.opens.push_back(o);
  Batch& b = p.batch;
  b.token_ids = {10, 11, 12, 13};
  b.positions = {0, 1, 2, 5};
  b.slot_mapping = {20, 21, 22, 13};
  b.query_start = {0, 3, 4};
  b.context_lens = {3, 6};
  b.max_blocks_per_seq = 2;
  b.block_tables = {5, 0, 1, 3};
  b.logits_rows = {2, 3};
  b.block_copies = {4, 7};  // block 4 left a sliding window
  p.sample_seq_ids = {1, 2};
  return p;
}

}  // namespace

TEST_CASE("a micro-batch plan survives encoding and decoding") {
  MicroBatchPlan in = plan();
  MicroBatchPlan out = decode_plan(encode_plan(in), session());
  CHECK(out.id == 42);
  CHECK(out.closes == std::vector<int64_t>{9});
  REQUIRE(out.opens.size() == 1);
  CHECK(out.opens[0].params.temperature == 0.7);
  CHECK(out.opens[0].params.top_k == 5);
  CHECK(out.opens[0].params.logit_bias.at(4) == 1.5f);
  CHECK(out.opens[0].params.top_logprobs == 2);
  CHECK(out.opens[0].tokens == std::vector<int32_t>{10, 11, 12});
  CHECK(out.batch.slot_mapping == in.batch.slot_mapping);
  CHECK(out.batch.block_tables == in.batch.block_tables);
  CHECK(out.batch.block_copies == in.batch.block_copies);
  CHECK(out.sample_seq_ids == in.sample_seq_ids);
  CHECK(out.row_masks == std::vector<std::vector<uint64_t>>{{}, {}});

  // A structured-output row carries its token mask.
  in.row_masks = {{}, std::vector<uint64_t>(size_t(mask_words(session().vocab_size)), 0x5)};
  CHECK(decode_plan(encode_plan(in), session()).row_masks == in.row_masks);
}

TEST_CASE("every truncation of a plan is refused") {
  auto bytes = encode_plan(plan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_THROWS_AS(decode_plan(cut, session()), InputError);
  }
  bytes.push_back(0);
  CHECK_THROWS_WITH_AS(decode_plan(bytes, session()), doctest::Contains("unexpected bytes"), InputError);
}

TEST_CASE("plans that would touch memory outside the worker's cache are refused") {
  auto refused = [](auto mutate, const char* why) {
    MicroBatchPlan p = plan();
    mutate(p);
    CHECK_THROWS_WITH_AS(decode_plan(encode_plan(p), session()), doctest::Contains(why), InputError);
  };
  refused([](MicroBatchPlan& p) { p.batch.block_tables[0] = 8; }, "block id 8");
  refused([](MicroBatchPlan& p) { p.batch.block_tables[0] = -1; }, "block id -1");
  refused([](MicroBatchPlan& p) { p.batch.slot_mapping[1] = 3; }, "slot outside its block table");
  refused([](MicroBatchPlan& p) { p.batch.positions[3] = 4; }, "position 4");
  refused([](MicroBatchPlan& p) { p.batch.context_lens[1] = 40; }, "impossible");
  refused([](MicroBatchPlan& p) { p.batch.query_start = {0, 0, 4}; }, "no rows");
  refused([](MicroBatchPlan& p) { p.batch.logits_rows = {3, 2}; }, "ascending");
  refused([](MicroBatchPlan& p) { p.row_masks = {{}, {1}}; }, "does not cover the vocabulary");
  refused([](MicroBatchPlan& p) { p.batch.max_blocks_per_seq = 1, p.batch.block_tables = {5, 1}; }, "longer than its block table");
  refused([](MicroBatchPlan& p) { p.sample_seq_ids = {1}; }, "sample_seq_ids");
  refused([](MicroBatchPlan& p) { p.opens[0].params.top_p = 2.0; }, "top_p");
  refused([](MicroBatchPlan& p) { p.opens[0].tokens[1] = 100; }, "outside the vocabulary");
  refused([](MicroBatchPlan& p) { p.batch.token_ids.assign(40, 1); }, "token_ids");
  refused([](MicroBatchPlan& p) { p.batch.block_copies = {4}; }, "pairs");
  refused([](MicroBatchPlan& p) { p.batch.block_copies = {7, 4}; }, "block copy 7 -> 4");
  refused([](MicroBatchPlan& p) { p.batch.block_copies = {4, 5}; }, "block copy 4 -> 5");
  refused([](MicroBatchPlan& p) { p.batch.block_copies = {4, 8}; }, "block copy 4 -> 8");
  refused([](MicroBatchPlan& p) { p.batch.block_copies = {-1, 7}; }, "block copy -1 -> 7");
  refused([](MicroBatchPlan& p) { p.batch.block_copies.assign(18, 0); }, "block_copies");
  refused([](MicroBatchPlan& p) { p.batch.state_slots = {0, 1}; }, "the session keeps 0");
}

TEST_CASE("a hybrid's plans name one distinct state slot per sequence, inside the session's") {
  Welcome s = session();
  s.state_slots = 4;
  MicroBatchPlan p = plan();
  p.batch.state_slots = {3, 0};
  CHECK(decode_plan(encode_plan(p), s).batch.state_slots == std::vector<int32_t>{3, 0});
  CHECK(decode_welcome(encode_welcome(s)).state_slots == 4);
  for (const auto& [slots, why] : std::vector<std::pair<std::vector<int32_t>, const char*>>{
           {{}, "one entry per sequence"}, {{1}, "one entry per sequence"}, {{1, 4}, "state slot 4"},
           {{-1, 2}, "state slot -1"}, {{2, 2}, "taken twice"}}) {
    CAPTURE(why);
    p.batch.state_slots = slots;
    CHECK_THROWS_WITH_AS(decode_plan(encode_plan(p), s), doctest::Contains(why), InputError);
  }
  // Snapshots before drafts and their restores: pairs of distinct slots of the session.
  p.batch.state_slots = {3, 0};
  p.batch.state_copies = {3, 1, 2, 0};
  CHECK(decode_plan(encode_plan(p), s).batch.state_copies == std::vector<int32_t>{3, 1, 2, 0});
  for (const auto& [copies, why] : std::vector<std::pair<std::vector<int32_t>, const char*>>{
           {{3}, "pairs"}, {{3, 4}, "state copy 3 -> 4"}, {{-1, 0}, "state copy -1 -> 0"}, {{2, 2}, "state copy 2 -> 2"}}) {
    CAPTURE(why);
    p.batch.state_copies = copies;
    CHECK_THROWS_WITH_AS(decode_plan(encode_plan(p), s), doctest::Contains(why), InputError);
  }
  // Without sliding layers, a resumed sequence's copy of its checkpoint's tail block goes
  // between any two distinct blocks.
  p.batch.state_copies.clear();
  p.batch.block_copies = {7, 4};
  CHECK_THROWS_WITH_AS(decode_plan(encode_plan(p), s), doctest::Contains("block copy 7 -> 4"), InputError);
  s.window_blocks = s.kv_blocks;
  CHECK(decode_plan(encode_plan(p), s).batch.block_copies == std::vector<int32_t>{7, 4});
  for (const auto& [copies, why] : std::vector<std::pair<std::vector<int32_t>, const char*>>{
           {{4, 4}, "block copy 4 -> 4"}, {{4, 8}, "block copy 4 -> 8"}, {{-1, 2}, "block copy -1 -> 2"}}) {
    CAPTURE(why);
    p.batch.block_copies = copies;
    CHECK_THROWS_WITH_AS(decode_plan(encode_plan(p), s), doctest::Contains(why), InputError);
  }
  // More than two micro-batches of sequences, each with a snapshot, and the most checkpoints can hold.
  s.state_slots = 4 * s.max_step_seqs + 8192 + 1;
  CHECK_THROWS_WITH_AS(decode_welcome(encode_welcome(s)), doctest::Contains("state_slots"), InputError);
}

TEST_CASE("frame headers: ours, this version, known types, within the reader's limit") {
  auto h = encode_header(FrameType::HELLO, 10);
  FrameHeader ok = decode_header(h.data(), 100);
  CHECK(ok.type == FrameType::HELLO);
  CHECK(ok.length == 10);
  CHECK_THROWS_WITH_AS(decode_header(h.data(), 9), doctest::Contains("larger than the 9 allowed"), InputError);
  auto bad = h;
  bad[0] ^= 1;
  CHECK_THROWS_WITH_AS(decode_header(bad.data(), 100), doctest::Contains("not a sparkd peer"), InputError);
  bad = h;
  bad[4] = 9;
  CHECK_THROWS_WITH_AS(decode_header(bad.data(), 100), doctest::Contains("version 9"), InputError);
  bad = h;
  bad[6] = 200;
  CHECK_THROWS_WITH_AS(decode_header(bad.data(), 100), doctest::Contains("unknown type"), InputError);
  bad = h;
  bad[12] = 1;
  CHECK_THROWS_WITH_AS(decode_header(bad.data(), 100), doctest::Contains("reserved"), InputError);
}

TEST_CASE("identity mismatches name both sides' values") {
  PeerIdentity head{"0.1.0", 1, "a.gguf (1 MiB)", 30, 15, 16, "bf16", "tcp", 100};
  PeerIdentity worker = head;
  CHECK(identity_mismatches(head, worker).empty());
  worker.kv_blocks = 200;  // a worker with more room is fine
  CHECK(identity_mismatches(head, worker).empty());
  worker.layer_split = 12;
  worker.block_size = 32;
  worker.model_fingerprint = 2;
  worker.model_label = "b.gguf (2 MiB)";
  worker.kv_blocks = 50;
  auto m = identity_mismatches(head, worker);
  REQUIRE(m.size() == 4);
  CHECK(m[0].find("head a.gguf") != std::string::npos);
  CHECK(m[0].find("worker b.gguf") != std::string::npos);
  CHECK(m[1].find("head 15, worker 12") != std::string::npos);
  CHECK(m[2].find("head 16, worker 32") != std::string::npos);
  CHECK(m[3].find("worker can hold only 50") != std::string::npos);
  auto bytes = encode_identity(head);
  CHECK(decode_identity(bytes).model_label == head.model_label);
}

TEST_CASE("step results and welcomes are bounds-checked") {
  StepResult r;
  r.id = 3;
  std::vector<SampleOutput>& samples = r.output.samples;
  samples.resize(2);
  samples[0].token = 5;
  samples[1].token = 7;
  samples[1].top_logprobs = {{7, -0.1f}, {8, -2.0f}};
  r.output.hidden = {0.5f, -1.25f, 3.0f, 0.0f};
  const ResultShape shape{2, 4, 100};
  StepResult back = decode_result(encode_result(r), shape);
  CHECK(back.output.samples[1].top_logprobs.size() == 2);
  CHECK(back.output.hidden == r.output.hidden);
  CHECK(encode_result(r).size() <= shape.max_payload());
  CHECK_THROWS_AS(decode_result(encode_result(r), {1, 4, 100}), InputError);  // more rows than asked
  CHECK_THROWS_WITH_AS(decode_result(encode_result(r), {2, 2, 100}), doctest::Contains("'hidden'"), InputError);
  CHECK_THROWS_WITH_AS(decode_result(encode_result(r), {2, 8, 100}), doctest::Contains("4 hidden values for 8"),
                       InputError);
  r.output.hidden[1] = std::nanf("");
  CHECK_THROWS_WITH_AS(decode_result(encode_result(r), shape), doctest::Contains("not finite"), InputError);
  r.output.hidden[1] = 0.0f;
  samples[0].token = 100;
  CHECK_THROWS_WITH_AS(decode_result(encode_result(r), shape), doctest::Contains("outside the vocabulary"), InputError);

  Welcome w = session();
  CHECK(decode_welcome(encode_welcome(w)).kv_blocks == 8);
  CHECK(decode_welcome(encode_welcome(w)).window_blocks == 6);
  for (int64_t bad : {0, 9}) {
    w.window_blocks = bad;
    CHECK_THROWS_WITH_AS(decode_welcome(encode_welcome(w)), doctest::Contains("window_blocks"), InputError);
  }
  w = session();
  w.timeout_s = 0.01;
  CHECK_THROWS_AS(decode_welcome(encode_welcome(w)), InputError);
  w = session();
  w.eos_token_ids = {100};
  CHECK_THROWS_AS(decode_welcome(encode_welcome(w)), InputError);
}

TEST_CASE("wire arrays cannot claim more than the frame holds") {
  WireWriter w;
  w.u32(1000000);  // a count with nothing behind it
  auto bytes = w.take();
  WireReader r(bytes);
  CHECK_THROWS_WITH_AS(r.array<int32_t>("ids", 2000000), doctest::Contains("frame ends first"), InputError);
}

TEST_CASE("peer.head_addr parsing") {
  CHECK(parse_endpoint("10.0.0.1:5000", "peer.head_addr").port == 5000);
  CHECK(parse_endpoint("[fe80::1]:7", "peer.head_addr").host == "fe80::1");
  CHECK_THROWS_WITH_AS(parse_endpoint("10.0.0.1", "peer.head_addr"), doctest::Contains("no port"), InputError);
  CHECK_THROWS_AS(parse_endpoint("h:70000", "peer.head_addr"), InputError);
  CHECK_THROWS_AS(parse_endpoint(":80", "peer.head_addr"), InputError);
}
