// worker.cpp — the worker's session loop: handshake, heartbeats, micro-batches.
#include "engine/peer/worker.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend/stage_loader.h"
#include "engine/core/sampler.h"
#include "engine/core/speculator.h"
#include "engine/model/memory_plan.h"
#include "engine/peer/frame.h"
#include "engine/peer/link.h"
#include "engine/peer/messages.h"
#include "engine/peer/model_identity.h"
#include "engine/peer/stage.h"
#include "engine/peer/wire.h"
#include "engine/util/log.h"
#include "engine/util/sd_notify.h"

namespace spark {

namespace {

constexpr size_t kMaxShadows = 1 << 16;
constexpr uint64_t kMaxLinkTestFloats = 64 << 20;

// What the sampler needs of a sequence the head is running.
struct Shadow {
  SamplingParams params;
  uint64_t seed = 0;
  int64_t num_prompt_tokens = 0;
  std::vector<int32_t> tokens;
};

// The rows one sequence samples in a micro-batch: its first logits row, then one more per
// draft it verifies (the drafts are the batch tokens of those rows).
struct Target {
  int64_t seq_id = 0;
  Shadow* shadow = nullptr;
  size_t first_row = 0;  // index into the plan's logits rows
  std::vector<int32_t> drafts;
  std::vector<int32_t> context;  // tokens + drafts, for the verification rows
};

// Groups the plan's logits rows by sequence. A head may give a sequence several rows only
// as adjacent rows of one batch sequence (its verification rows).
std::vector<Target> group_targets(const MicroBatchPlan& plan, std::unordered_map<int64_t, Shadow>& shadows) {
  const Batch& b = plan.batch;
  auto batch_seq_of = [&b](int32_t row) {
    return std::upper_bound(b.query_start.begin(), b.query_start.end(), row) - b.query_start.begin();
  };
  std::vector<Target> targets;
  std::unordered_set<int64_t> seen;
  for (size_t r = 0; r < plan.sample_seq_ids.size(); ++r) {
    const int64_t id = plan.sample_seq_ids[r];
    if (!targets.empty() && targets.back().seq_id == id) {
      const int32_t row = b.logits_rows[r];
      if (row != b.logits_rows[r - 1] + 1 || batch_seq_of(row) != batch_seq_of(row - 1))
        throw InputError("the head sampled sequence " + std::to_string(id) + " at rows that are not its adjacent rows");
      targets.back().drafts.push_back(b.token_ids[size_t(row)]);
      continue;
    }
    auto it = shadows.find(id);
    if (it == shadows.end()) throw InputError("the head asked to sample for unknown sequence " + std::to_string(id));
    if (!seen.insert(id).second)
      throw InputError("the head sampled sequence " + std::to_string(id) + " twice in one step");
    targets.push_back({id, &it->second, r, {}, {}});
  }
  return targets;
}

// Whether two EOS id lists hold the same ids, in any order.
bool same_ids(std::vector<int32_t> a, std::vector<int32_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return a == b;
}

// The head refused this box for good (a mismatch), as opposed to a lost connection.
struct Refused : InputError {
  using InputError::InputError;
};

class Worker {
 public:
  Worker(const Config& config, const std::atomic<bool>& stop) : config_(config), stop_(stop) {}

  int run() {
    load();
    const Endpoint head = parse_endpoint(config_.peer.head_addr, "peer.head_addr");
    sd_notify("READY=1\nSTATUS=worker: waiting for the head at " + head.str());
    std::string last_problem;
    while (!stop_) {
      try {
        session(head);
      } catch (const Refused& e) {
        log_error("peer: ", e.what());
        return 2;
      } catch (const std::exception& e) {
        std::string problem = e.what();
        if (problem != last_problem) log_warn("peer: ", problem, "; retrying every second");
        last_problem = problem;
      }
      shadows_.clear();  // the head's sequences died with the pairing
      sd_notify("WATCHDOG=1");  // waiting for a head is healthy; a wedged worker stops pinging
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }

 private:
  void load() {
    loaded_ = load_stage(config_);
    const LayerRange range = loaded_->plan.range;
    backend_ = loaded_->backend.get();
    if (config_.peer.transport == "nccl") require_nccl_backend(*backend_);
    identity_ = local_identity(config_, loaded_->plan, loaded_->plan.memory.kv_blocks);
    log_info("peer: worker holds layers [", range.first_layer, ", ", range.last_layer, ") of ", identity_.model_label,
             " on ", backend_->describe(), "; room for ", identity_.kv_blocks, " KV blocks");
  }

  void session(const Endpoint& head) {
    const double timeout = config_.peer.timeout_s;
    Socket control = connect_to(head, steady_after(timeout));
    write_frame(control, FrameType::HELLO, encode_identity(identity_), steady_after(timeout));
    Frame answer = read_frame(control, kMaxControlPayload, steady_after(timeout));
    if (answer.type == FrameType::REFUSE) {
      std::string why = decode_text(answer.payload);
      if (why.rfind("busy:", 0) == 0) throw PeerLost("the head refused: " + why);  // try again later
      throw Refused("the head at " + head.str() + " refused this worker: " + why);
    }
    if (answer.type != FrameType::WELCOME)
      throw InputError("the head sent " + std::string(frame_type_name(answer.type)) + " where WELCOME was expected");
    const Welcome w = decode_welcome(answer.payload);
    const ModelSpec& spec = loaded_->plan.info.spec;
    if (w.hidden_size != spec.hidden_size || w.vocab_size != spec.vocab_size ||
        w.block_size != config_.engine.block_size || w.kv_blocks > identity_.kv_blocks)
      throw Refused("the head's session (hidden " + std::to_string(w.hidden_size) + ", vocab " +
                    std::to_string(w.vocab_size) + ", block size " + std::to_string(w.block_size) + ", " +
                    std::to_string(w.kv_blocks) + " KV blocks) does not fit this worker (hidden " +
                    std::to_string(spec.hidden_size) + ", vocab " + std::to_string(spec.vocab_size) + ", block size " +
                    std::to_string(config_.engine.block_size) + ", room for " + std::to_string(identity_.kv_blocks) +
                    " KV blocks)");
    // The session's cache, its sliding layers holding the window blocks only, in the
    // bytes this box planned for its own (identity_.kv_blocks in its windowed plan).
    const MemoryPlan& plan = loaded_->plan.memory;
    const uint64_t needed = kv_cache_bytes(plan, w.kv_blocks, w.window_blocks);
    if (needed > kv_cache_bytes(plan, plan.kv_blocks))
      throw Refused("the head's session (" + std::to_string(w.kv_blocks) + " KV blocks, " +
                    std::to_string(w.window_blocks) + " of them in the sliding layers) needs " + format_bytes(needed) +
                    " of KV cache here, and this worker planned " + format_bytes(kv_cache_bytes(plan, plan.kv_blocks)));
    bool renewed = false;
    if (w.kv_blocks != kv_blocks_ || w.window_blocks != window_blocks_) {
      renewed = true;
      backend_->init_windowed_kv_cache(w.kv_blocks, w.window_blocks, w.block_size);
      kv_blocks_ = w.kv_blocks;
      window_blocks_ = w.window_blocks;
      log_info("peer: the session's KV cache: ", w.kv_blocks, " blocks, ", w.window_blocks, " of them in every layer (",
               format_bytes(needed), ")");
    }
    // The state slots of this box's recurrent layers, as many as the head's engine keeps;
    // a sequence's first rows (position 0) start its state fresh, so a new session needs
    // new slots only when their count changes.
    if ((w.state_slots > 0) != spec.has_recurrent_layers())
      throw Refused("the head's session keeps " + std::to_string(w.state_slots) + " recurrent state slots, and " +
                    spec.architecture + (spec.has_recurrent_layers() ? " has" : " has no") + " recurrent layers");
    if (w.state_slots != state_slots_) {
      renewed = true;
      backend_->init_state_slots(w.state_slots);
      state_slots_ = w.state_slots;
      log_info("peer: the session's recurrent state: ", w.state_slots, " slots (",
               format_bytes(plan.state_bytes_per_sequence * uint64_t(w.state_slots)), ")");
    }
    if (renewed) backend_->warm_up();  // a new cache or new slots dropped the decode graphs
    sampler_ = std::make_unique<Sampler>(spec.vocab_size, w.eos_token_ids);
    // The device sampler knows the EOS ids of this box's model files; the head's set (the
    // tokenizer's EOS added) decides min_tokens, so the device samples only when they agree.
    device_sampling_ = backend_->samples_on_device() && same_ids(spec.eos_token_ids, w.eos_token_ids);

    Socket data = connect_to(head, steady_after(timeout));
    WireWriter hello;
    hello.u64(w.session);
    write_frame(data, FrameType::DATA_HELLO, hello.bytes(), steady_after(timeout));
    std::unique_ptr<Link> link = config_.peer.transport == "nccl" ? make_nccl_link(config_.peer, 1, w.nccl_unique_id)
                                                                  : make_tcp_link(data);
    write_frame(control, FrameType::READY, {}, steady_after(timeout));

    // The control channel on a thread of its own: heartbeats both ways, pings answered.
    std::atomic<bool> alive{true};
    std::string why;
    std::mutex why_mu;
    auto fail = [&](const std::string& reason) {
      std::lock_guard lock(why_mu);
      if (!alive) return;
      why = reason;
      alive = false;
      control.shutdown();
      data.shutdown();
      link->abort();
    };
    std::thread watcher([&] {
      auto last_seen = std::chrono::steady_clock::now(), last_sent = last_seen;
      try {
        for (;;) {
          Frame f = read_frame(control, kMaxControlPayload, kNoDeadline, [&] {
            if (!alive || stop_) throw PeerLost(stop_ ? "the worker is stopping" : "the data path failed");
            auto now = std::chrono::steady_clock::now();
            if (std::chrono::duration<double>(now - last_seen).count() > timeout)
              throw PeerLost("no heartbeat from the head for " + std::to_string(timeout) + " s (peer.timeout_s)");
            if (std::chrono::duration<double>(now - last_sent).count() >= w.heartbeat_s) {
              last_sent = now;
              write_frame(control, FrameType::HEARTBEAT, {}, steady_after(timeout));
              sd_notify("WATCHDOG=1");
            }
          });
          last_seen = std::chrono::steady_clock::now();
          if (f.type == FrameType::PING) write_frame(control, FrameType::PONG, {}, steady_after(timeout));
          else if (f.type != FrameType::HEARTBEAT)
            throw InputError("unexpected " + std::string(frame_type_name(f.type)) + " on the control channel");
        }
      } catch (const std::exception& e) {
        fail(e.what());
      }
    });
    log_info("peer: paired with the head at ", head.str(), " (session ", w.session, ", ", link->describe(), ")");
    sd_notify("STATUS=worker: paired with the head at " + head.str());
    try {
      serve(data, *link, w, [&] {
        if (alive) return;
        std::lock_guard lock(why_mu);
        throw PeerLost(why);
      });
    } catch (const std::exception& e) {
      fail(e.what());
    }
    watcher.join();
    link.reset();  // aborted above: a blocked NCCL call cannot hold the teardown
    throw PeerLost("the session with the head at " + head.str() + " ended: " + why);
  }

  // Micro-batches in order until the link fails (which throws).
  void serve(const Socket& data, Link& link, const Welcome& w, const WaitCheck& check) {
    // Per sequence: its tokens when opened, and its rows' masks when constrained.
    const size_t max_plan = (1u << 20) + size_t(w.max_step_tokens) * 64 +
                            size_t(w.max_step_seqs) * (size_t(w.max_model_len) * 8 + (64u << 10) +
                                                       size_t(mask_words(w.vocab_size)) * 8);
    std::vector<float> hidden;
    ForwardResult out;
    for (;;) {
      Frame f = read_frame(data, max_plan, kNoDeadline, check);
      if (f.type == FrameType::LINK_TEST) {
        WireReader r(f.payload);
        uint64_t n = r.u64("count");
        if (n > kMaxLinkTestFloats) throw InputError("link test of " + std::to_string(n) + " floats is too large");
        hidden.resize(n);
        link.recv(hidden.data(), n, check);
        write_frame(data, FrameType::LINK_TEST_ACK, {}, kNoDeadline, check);
        continue;
      }
      if (f.type != FrameType::MICRO_BATCH)
        throw InputError("unexpected " + std::string(frame_type_name(f.type)) + " on the data path");
      MicroBatchPlan plan = decode_plan(f.payload, w);
      for (int64_t id : plan.closes) shadows_.erase(id);
      for (SeqOpen& o : plan.opens) {
        if (shadows_.size() >= kMaxShadows) throw InputError("the head opened more than " + std::to_string(kMaxShadows) + " sequences");
        shadows_[o.seq_id] = Shadow{std::move(o.params), o.seed, o.num_prompt_tokens, std::move(o.tokens)};
      }
      std::vector<Target> targets = group_targets(plan, shadows_);
      // A link that moves device memory receives straight into the backend's input
      // buffer, where the forward reads it (hidden_in = nullptr); else f32 via the host.
      const size_t values = size_t(plan.batch.num_tokens()) * size_t(w.hidden_size);
      const bool on_device = link.moves_device_memory() && backend_->boundary_on_device();
      if (on_device) {
        link.recv_device(backend_->boundary_input(size_t(plan.batch.num_tokens())), check);
      } else {
        hidden.resize(values);
        link.recv(hidden.data(), hidden.size(), check);
      }

      for (const Target& t : targets)
        if (int64_t(t.shadow->tokens.size() + t.drafts.size()) >= w.max_model_len)
          throw InputError("the head asked for a token beyond max_model_len for sequence " + std::to_string(t.seq_id));

      StepResult result;
      result.id = plan.id;
      result.worker_start_us = wall_us();
      sample(plan.batch, on_device ? nullptr : hidden.data(), targets, plan.row_masks, size_t(w.vocab_size), out,
             result.output);
      // This box's samples decide which drafts hold; the head applies the same rule to
      // the same samples, so both keep the same tokens (and roll back the same KV).
      std::vector<int32_t> sampled;
      for (const SampleOutput& o : result.output.samples) sampled.push_back(o.token);
      for (const Target& t : targets) {
        const size_t accepted = accepted_drafts(t.drafts, sampled.data() + t.first_row);
        t.shadow->tokens.insert(t.shadow->tokens.end(), sampled.begin() + std::ptrdiff_t(t.first_row),
                                sampled.begin() + std::ptrdiff_t(t.first_row + accepted + 1));
      }
      result.worker_end_us = wall_us();
      write_frame(data, FrameType::STEP_RESULT, encode_result(result), kNoDeadline, check);
    }
  }

  // The last stage's forward and one sample per logits row (targets[i] owns rows
  // first_row .. first_row + drafts): on the device when the backend samples there (only
  // ids and logprobs cross the bus), else from its logits with the engine's Sampler. Both
  // draw uniform01(seed, n) for a sequence's n-th output token, as the head would.
  // A row with a mask (structured output) is masked first, so a step with one samples here.
  // The batch's hidden rows come back beside the samples.
  void sample(const Batch& batch, const float* hidden, std::vector<Target>& targets,
              const std::vector<std::vector<uint64_t>>& masks, size_t vocab, ForwardResult& out,
              StepOutput& result) {
    std::vector<SampleRow> rows(batch.logits_rows.size());
    for (Target& t : targets)
      verification_rows(t.shadow->params, t.shadow->tokens, t.shadow->num_prompt_tokens, t.shadow->seed, t.drafts,
                        t.context, &rows[t.first_row]);
    const bool masked = std::any_of(masks.begin(), masks.end(), [](const auto& m) { return !m.empty(); });
    if (device_sampling_ && !masked) {
      backend_->forward_sample(batch, hidden, rows, result);
      return;
    }
    backend_->forward(batch, hidden, out);
    SPARK_CHECK(out.logits.size() == rows.size() * vocab, "the last stage returns one logits row per sample");
    result.hidden = std::move(out.final_hidden);
    std::vector<SampleOutput>& samples = result.samples;
    samples.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampleRow& q = rows[i];
      const float* logits = out.logits.data() + i * vocab;
      samples.push_back(i < masks.size() && !masks[i].empty()
                            ? sampler_->sample(logits, *q.params, q.context, q.num_prompt_tokens, q.seed, q.counter, masks[i])
                            : sampler_->sample(logits, *q.params, q.context, q.num_prompt_tokens, q.seed, q.counter));
    }
  }

  const Config& config_;
  const std::atomic<bool>& stop_;
  std::unique_ptr<LoadedStage> loaded_;
  Backend* backend_ = nullptr;
  PeerIdentity identity_;
  int64_t kv_blocks_ = 0, window_blocks_ = 0, state_slots_ = 0;
  std::unique_ptr<Sampler> sampler_;
  bool device_sampling_ = false;
  std::unordered_map<int64_t, Shadow> shadows_;
};

}  // namespace

int run_worker(const Config& config, const std::atomic<bool>& stop) { return Worker(config, stop).run(); }

}  // namespace spark
