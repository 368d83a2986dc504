// messages.cpp — encoding and validating decoding of the peer protocol's payloads.
#include "engine/peer/messages.h"

#include <algorithm>
#include <cmath>

#include "engine/peer/frame.h"
#include "engine/peer/wire.h"

namespace spark {

namespace {

constexpr size_t kMaxName = 4096;
constexpr size_t kMaxOpenSeqs = 1 << 16;   // sequences one plan may open or close
constexpr size_t kMaxNcclId = 128;         // NCCL_UNIQUE_ID_BYTES
constexpr size_t kMaxEosIds = 64;

[[noreturn]] void bad(const std::string& what) { throw InputError("peer micro-batch: " + what); }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void put_params(WireWriter& w, const SamplingParams& p) {
  w.f64(p.temperature);
  w.i32(p.top_k);
  w.f64(p.top_p);
  w.f64(p.min_p);
  w.f64(p.repetition_penalty);
  w.f64(p.presence_penalty);
  w.f64(p.frequency_penalty);
  w.u32(uint32_t(p.logit_bias.size()));
  for (const auto& [id, bias] : p.logit_bias) {
    w.i32(id);
    w.f32(bias);
  }
  w.u8(p.logprobs);
  w.i32(p.top_logprobs);
  w.i64(p.min_tokens);
  w.array(p.stop_token_ids);
  w.u8(p.ignore_eos);
}

SamplingParams get_params(WireReader& r, int64_t vocab_size) {
  SamplingParams p;
  p.temperature = r.f64("temperature");
  p.top_k = r.i32("top_k");
  p.top_p = r.f64("top_p");
  p.min_p = r.f64("min_p");
  p.repetition_penalty = r.f64("repetition_penalty");
  p.presence_penalty = r.f64("presence_penalty");
  p.frequency_penalty = r.f64("frequency_penalty");
  size_t n = r.count("logit_bias", 8, kMaxLogitBias);
  for (size_t i = 0; i < n; ++i) {
    int32_t id = r.i32("logit_bias id");
    p.logit_bias[id] = r.f32("logit_bias value");
  }
  p.logprobs = r.boolean("logprobs");
  p.top_logprobs = r.i32("top_logprobs");
  p.min_tokens = r.i64("min_tokens");
  p.stop_token_ids = r.array<int32_t>("stop_token_ids", kMaxStopTokenIds);
  p.ignore_eos = r.boolean("ignore_eos");
  p.validate(vocab_size);  // InputError names the parameter
  return p;
}

}  // namespace

// ---- identity ------------------------------------------------------------------------

std::vector<uint8_t> encode_identity(const PeerIdentity& id) {
  WireWriter w;
  w.str(id.sparkd_version);
  w.u64(id.model_fingerprint);
  w.str(id.model_label);
  w.i64(id.num_layers);
  w.i64(id.layer_split);
  w.i64(id.block_size);
  w.str(id.kv_dtype);
  w.str(id.transport);
  w.i64(id.kv_blocks);
  return w.take();
}

PeerIdentity decode_identity(const std::vector<uint8_t>& payload) {
  WireReader r(payload);
  PeerIdentity id;
  id.sparkd_version = r.str("sparkd_version", kMaxName);
  id.model_fingerprint = r.u64("model_fingerprint");
  id.model_label = r.str("model_label", kMaxName);
  id.num_layers = r.i64("num_layers");
  id.layer_split = r.i64("layer_split");
  id.block_size = r.i64("block_size");
  id.kv_dtype = r.str("kv_dtype", kMaxName);
  id.transport = r.str("transport", kMaxName);
  id.kv_blocks = r.i64("kv_blocks");
  r.expect_end("identity");
  return id;
}

std::vector<std::string> identity_mismatches(const PeerIdentity& head, const PeerIdentity& worker) {
  std::vector<std::string> out;
  auto differ = [&out](const std::string& what, const std::string& h, const std::string& w) {
    if (h != w) out.push_back(what + ": head " + h + ", worker " + w);
  };
  differ("sparkd version", head.sparkd_version, worker.sparkd_version);
  if (head.model_fingerprint != worker.model_fingerprint)
    out.push_back("model: head " + head.model_label + " (fingerprint " + hex(head.model_fingerprint) + "), worker " +
                  worker.model_label + " (fingerprint " + hex(worker.model_fingerprint) + ")");
  differ("number of layers", std::to_string(head.num_layers), std::to_string(worker.num_layers));
  differ("layer split (peer.layer_split, first worker layer)", std::to_string(head.layer_split),
         std::to_string(worker.layer_split));
  differ("block size (engine.block_size)", std::to_string(head.block_size), std::to_string(worker.block_size));
  differ("KV cache dtype (engine.kv_cache_dtype)", head.kv_dtype, worker.kv_dtype);
  differ("transport (peer.transport)", head.transport, worker.transport);
  if (worker.kv_blocks < head.kv_blocks)
    out.push_back("KV blocks: head uses " + std::to_string(head.kv_blocks) + ", worker can hold only " +
                  std::to_string(worker.kv_blocks) + " (give the worker more memory or lower the head's)");
  return out;
}

// ---- welcome -------------------------------------------------------------------------

std::vector<uint8_t> encode_welcome(const Welcome& m) {
  WireWriter w;
  w.u64(m.session);
  w.i64(m.kv_blocks);
  w.i64(m.window_blocks);
  w.i64(m.state_slots);
  w.i64(m.block_size);
  w.i64(m.max_step_tokens);
  w.i64(m.max_step_seqs);
  w.i64(m.max_model_len);
  w.i64(m.vocab_size);
  w.i64(m.hidden_size);
  w.array(m.eos_token_ids);
  w.f64(m.heartbeat_s);
  w.f64(m.timeout_s);
  w.array(m.nccl_unique_id);
  return w.take();
}

Welcome decode_welcome(const std::vector<uint8_t>& payload) {
  WireReader r(payload);
  Welcome m;
  m.session = r.u64("session");
  m.kv_blocks = r.i64("kv_blocks");
  m.window_blocks = r.i64("window_blocks");
  m.state_slots = r.i64("state_slots");
  m.block_size = r.i64("block_size");
  m.max_step_tokens = r.i64("max_step_tokens");
  m.max_step_seqs = r.i64("max_step_seqs");
  m.max_model_len = r.i64("max_model_len");
  m.vocab_size = r.i64("vocab_size");
  m.hidden_size = r.i64("hidden_size");
  m.eos_token_ids = r.array<int32_t>("eos_token_ids", kMaxEosIds);
  m.heartbeat_s = r.f64("heartbeat_s");
  m.timeout_s = r.f64("timeout_s");
  m.nccl_unique_id = r.array<uint8_t>("nccl_unique_id", kMaxNcclId);
  r.expect_end("welcome");
  auto in = [](int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi)
      throw InputError(std::string("peer welcome: ") + what + " = " + std::to_string(v) + " is outside [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  in(m.kv_blocks, 1, int64_t(1) << 30, "kv_blocks");
  in(m.window_blocks, 1, m.kv_blocks, "window_blocks");
  in(m.block_size, 1, 1 << 16, "block_size");
  in(m.max_step_tokens, 1, int64_t(1) << 20, "max_step_tokens");
  in(m.max_step_seqs, 1, int64_t(1) << 16, "max_step_seqs");
  // Rounded up per micro-batch slot, snapshots, and the checkpoints (engine.state_checkpoints <= 8192).
  in(m.state_slots, 0, 4 * m.max_step_seqs + 8192, "state_slots");
  in(m.max_model_len, 1, int64_t(1) << 24, "max_model_len");
  in(m.vocab_size, 1, int64_t(1) << 24, "vocab_size");
  in(m.hidden_size, 1, int64_t(1) << 20, "hidden_size");
  for (int32_t id : m.eos_token_ids) in(id, 0, m.vocab_size - 1, "eos token id");
  if (!(m.heartbeat_s > 0 && m.heartbeat_s <= 60 && m.timeout_s >= m.heartbeat_s && m.timeout_s <= 3600))
    throw InputError("peer welcome: heartbeat " + std::to_string(m.heartbeat_s) + " s / timeout " +
                     std::to_string(m.timeout_s) + " s are out of range");
  return m;
}

// ---- micro-batch plans ---------------------------------------------------------------

std::vector<uint8_t> encode_plan(const MicroBatchPlan& p) {
  WireWriter w;
  w.u64(p.id);
  w.array(p.closes);
  w.u32(uint32_t(p.opens.size()));
  for (const SeqOpen& o : p.opens) {
    w.i64(o.seq_id);
    w.i64(o.num_prompt_tokens);
    w.u64(o.seed);
    put_params(w, o.params);
    w.array(o.tokens);
  }
  const Batch& b = p.batch;
  w.array(b.token_ids);
  w.array(b.positions);
  w.array(b.slot_mapping);
  w.array(b.query_start);
  w.array(b.context_lens);
  w.i32(b.max_blocks_per_seq);
  w.array(b.block_tables);
  w.array(b.logits_rows);
  w.array(b.hidden_rows);
  w.array(b.state_slots);
  w.array(b.state_copies);
  w.array(b.block_copies);
  w.array(p.sample_seq_ids);
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    w.array(i < p.row_masks.size() ? p.row_masks[i] : std::vector<uint64_t>{});
  return w.take();
}

void check_batch(const Batch& b, const Welcome& s) {
  const int64_t T = b.num_tokens();
  if (T < 1 || T > s.max_step_tokens)
    bad(std::to_string(T) + " tokens, outside [1, " + std::to_string(s.max_step_tokens) + "]");
  if (int64_t(b.positions.size()) != T || int64_t(b.slot_mapping.size()) != T)
    bad("positions / slot_mapping do not have one entry per token");
  const int64_t S = b.num_seqs();
  if (S < 1 || S > s.max_step_seqs) bad(std::to_string(S) + " sequences, outside [1, " + std::to_string(s.max_step_seqs) + "]");
  if (int64_t(b.context_lens.size()) != S) bad("context_lens does not have one entry per sequence");
  if (b.query_start[0] != 0 || b.query_start[size_t(S)] != T) bad("query_start does not span the tokens");
  const int64_t max_blocks = b.max_blocks_per_seq;
  if (max_blocks < 1 || uint64_t(b.block_tables.size()) != uint64_t(S) * uint64_t(max_blocks))
    bad("block_tables is not sequences x max_blocks_per_seq");
  for (int32_t id : b.token_ids)
    if (id < 0 || id >= s.vocab_size) bad("token id " + std::to_string(id) + " outside the vocabulary");
  for (int32_t blk : b.block_tables)
    if (blk < 0 || blk >= s.kv_blocks) bad("block id " + std::to_string(blk) + " outside [0, " + std::to_string(s.kv_blocks) + ")");
  for (int64_t q = 0; q < S; ++q) {
    const int64_t begin = b.query_start[size_t(q)], end = b.query_start[size_t(q) + 1];
    if (end <= begin) bad("sequence " + std::to_string(q) + " has no rows");
    const int64_t ctx = b.context_lens[size_t(q)];
    if (ctx < end - begin || ctx > s.max_model_len) bad("context length " + std::to_string(ctx) + " is impossible");
    if ((ctx + s.block_size - 1) / s.block_size > max_blocks) bad("a context longer than its block table");
    // Rows are the last tokens of the context, and each writes the slot its position
    // maps to: the backend may then index the cache without further checks.
    const int32_t* table = b.block_tables.data() + q * max_blocks;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t pos = ctx - (end - i);
      if (b.positions[size_t(i)] != pos) bad("row " + std::to_string(i) + " has position " + std::to_string(b.positions[size_t(i)]) + ", expected " + std::to_string(pos));
      if (b.slot_mapping[size_t(i)] != int64_t(table[pos / s.block_size]) * s.block_size + pos % s.block_size)
        bad("row " + std::to_string(i) + " writes a KV slot outside its block table");
    }
  }
  // A copy moves a block that left a sliding window to a block only full-attention layers
  // hold; without sliding layers, it gives a resumed sequence its checkpoint's tail block.
  if (b.block_copies.size() % 2 != 0) bad("block_copies does not hold (source, destination) pairs");
  const bool sliding = s.window_blocks < s.kv_blocks;
  for (size_t i = 0; i < b.block_copies.size(); i += 2) {
    const int32_t src = b.block_copies[i], dst = b.block_copies[i + 1];
    if (sliding && (src < 0 || src >= s.window_blocks || dst < s.window_blocks || dst >= s.kv_blocks))
      bad("block copy " + std::to_string(src) + " -> " + std::to_string(dst) + " is not from [0, " +
          std::to_string(s.window_blocks) + ") to [" + std::to_string(s.window_blocks) + ", " +
          std::to_string(s.kv_blocks) + ")");
    if (!sliding && (src < 0 || src >= s.kv_blocks || dst < 0 || dst >= s.kv_blocks || src == dst))
      bad("block copy " + std::to_string(src) + " -> " + std::to_string(dst) + " is not between two blocks of [0, " +
          std::to_string(s.kv_blocks) + ")");
  }
  auto check_rows = [T](const std::vector<int32_t>& rows, const char* name) {
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i] < 0 || rows[i] >= T || (i > 0 && rows[i] <= rows[i - 1]))
        bad(std::string(name) + " are not ascending rows of the batch");
  };
  check_rows(b.logits_rows, "logits_rows");
  check_rows(b.hidden_rows, "hidden_rows");
  // One distinct state slot per sequence where the session keeps them, none otherwise.
  if (int64_t(b.state_slots.size()) != (s.state_slots > 0 ? S : 0))
    bad("state_slots does not have one entry per sequence (the session keeps " + std::to_string(s.state_slots) + ")");
  std::vector<int32_t> slots = b.state_slots;
  std::sort(slots.begin(), slots.end());
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i] < 0 || slots[i] >= s.state_slots || (i > 0 && slots[i] == slots[i - 1]))
      bad("state slot " + std::to_string(slots[i]) + " is outside [0, " + std::to_string(s.state_slots) + ") or taken twice");
  // A snapshot before drafts, or its restore: between two distinct slots of the session.
  if (b.state_copies.size() % 2 != 0) bad("state_copies does not hold (source, destination) pairs");
  for (size_t i = 0; i < b.state_copies.size(); i += 2) {
    const int32_t src = b.state_copies[i], dst = b.state_copies[i + 1];
    if (src < 0 || src >= s.state_slots || dst < 0 || dst >= s.state_slots || src == dst)
      bad("state copy " + std::to_string(src) + " -> " + std::to_string(dst) + " is not between two slots of [0, " +
          std::to_string(s.state_slots) + ")");
  }
}

MicroBatchPlan decode_plan(const std::vector<uint8_t>& payload, const Welcome& s) {
  WireReader r(payload);
  MicroBatchPlan p;
  p.id = r.u64("id");
  p.closes = r.array<int64_t>("closes", kMaxOpenSeqs);
  size_t n_open = r.count("opens", 1, size_t(s.max_step_seqs));
  for (size_t i = 0; i < n_open; ++i) {
    SeqOpen o;
    o.seq_id = r.i64("seq_id");
    o.num_prompt_tokens = r.i64("num_prompt_tokens");
    o.seed = r.u64("seed");
    o.params = get_params(r, s.vocab_size);
    o.tokens = r.array<int32_t>("tokens", size_t(s.max_model_len));
    if (o.num_prompt_tokens < 1 || o.num_prompt_tokens > int64_t(o.tokens.size())) bad("an opened sequence's prompt length is impossible");
    for (int32_t t : o.tokens)
      if (t < 0 || t >= s.vocab_size) bad("token id " + std::to_string(t) + " outside the vocabulary");
    p.opens.push_back(std::move(o));
  }
  const size_t max_rows = size_t(s.max_step_tokens), max_seqs = size_t(s.max_step_seqs);
  Batch& b = p.batch;
  b.token_ids = r.array<int32_t>("token_ids", max_rows);
  b.positions = r.array<int32_t>("positions", max_rows);
  b.slot_mapping = r.array<int32_t>("slot_mapping", max_rows);
  b.query_start = r.array<int32_t>("query_start", max_seqs + 1);
  b.context_lens = r.array<int32_t>("context_lens", max_seqs);
  b.max_blocks_per_seq = r.i32("max_blocks_per_seq");
  if (b.query_start.empty()) bad("query_start is empty");
  const int64_t max_blocks_per_seq = s.max_model_len;  // blocks hold >= 1 token each
  if (b.max_blocks_per_seq < 1 || b.max_blocks_per_seq > max_blocks_per_seq) bad("max_blocks_per_seq is impossible");
  b.block_tables = r.array<int32_t>("block_tables", max_seqs * size_t(b.max_blocks_per_seq));
  b.logits_rows = r.array<int32_t>("logits_rows", max_seqs);
  b.hidden_rows = r.array<int32_t>("hidden_rows", max_rows);
  b.state_slots = r.array<int32_t>("state_slots", max_seqs);
  // Per sequence: a snapshot or a restore, a resume, and the checkpoints saved since the
  // last step (a prompt's end, an answer's end, a preemption).
  b.state_copies = r.array<int32_t>("state_copies", 2 * 8 * max_seqs);
  b.block_copies = r.array<int32_t>("block_copies", 2 * size_t(s.kv_blocks));
  p.sample_seq_ids = r.array<int64_t>("sample_seq_ids", max_seqs);
  p.row_masks.resize(b.logits_rows.size());
  for (auto& mask : p.row_masks) {
    mask = r.array<uint64_t>("row_masks", size_t(mask_words(s.vocab_size)));
    if (!mask.empty() && int64_t(mask.size()) != mask_words(s.vocab_size)) bad("a row mask does not cover the vocabulary");
  }
  r.expect_end("micro-batch plan");
  check_batch(b, s);
  if (p.sample_seq_ids.size() != b.logits_rows.size()) bad("sample_seq_ids does not match logits_rows");
  return p;
}

// ---- results -------------------------------------------------------------------------

std::vector<uint8_t> encode_result(const StepResult& r) {
  WireWriter w;
  w.u64(r.id);
  w.i64(r.worker_start_us);
  w.i64(r.worker_end_us);
  w.u32(uint32_t(r.output.samples.size()));
  for (const SampleOutput& s : r.output.samples) {
    w.i32(s.token);
    w.f32(s.logprob);
    w.u32(uint32_t(s.top_logprobs.size()));
    for (const auto& [id, lp] : s.top_logprobs) {
      w.i32(id);
      w.f32(lp);
    }
  }
  w.array(r.output.hidden);
  return w.take();
}

size_t ResultShape::max_payload() const {
  return 64 + rows * (16 + 8 * size_t(kMaxTopLogprobs)) + hidden_values * 4;
}

StepResult decode_result(const std::vector<uint8_t>& payload, const ResultShape& shape) {
  const int64_t vocab_size = shape.vocab_size;
  WireReader r(payload);
  StepResult out;
  out.id = r.u64("id");
  out.worker_start_us = r.i64("worker_start_us");
  out.worker_end_us = r.i64("worker_end_us");
  size_t n = r.count("samples", 12, shape.rows);
  if (n != shape.rows)
    throw InputError("peer step result: " + std::to_string(n) + " samples for " + std::to_string(shape.rows) + " rows");
  out.output.samples.resize(n);
  for (SampleOutput& s : out.output.samples) {
    s.token = r.i32("token");
    if (s.token < 0 || s.token >= vocab_size) throw InputError("peer step result: token " + std::to_string(s.token) + " outside the vocabulary");
    s.logprob = r.f32("logprob");
    size_t k = r.count("top_logprobs", 8, size_t(kMaxTopLogprobs));
    for (size_t i = 0; i < k; ++i) {
      int32_t id = r.i32("top_logprobs id");
      float lp = r.f32("top_logprobs value");
      if (id < 0 || id >= vocab_size) throw InputError("peer step result: top_logprobs token outside the vocabulary");
      s.top_logprobs.emplace_back(id, lp);
    }
  }
  out.output.hidden = r.array<float>("hidden", shape.hidden_values);
  if (out.output.hidden.size() != shape.hidden_values)
    throw InputError("peer step result: " + std::to_string(out.output.hidden.size()) + " hidden values for " +
                     std::to_string(shape.hidden_values));
  for (float v : out.output.hidden)
    if (!std::isfinite(v)) throw InputError("peer step result: a hidden state value is not finite");
  r.expect_end("step result");
  return out;
}

std::vector<uint8_t> encode_text(const std::string& s) {
  WireWriter w;
  w.str(s.substr(0, kMaxControlPayload - 8));
  return w.take();
}

std::string decode_text(const std::vector<uint8_t>& payload) {
  WireReader r(payload);
  std::string s = r.str("text", kMaxControlPayload);
  r.expect_end("text");
  return s;
}

}  // namespace spark
