// engine.cpp — the engine thread's step loop, request intake, output emission and
// failure handling.
#include "engine/core/engine.h"

#include <algorithm>
#include <random>

#include "engine/core/local_executor.h"
#include "engine/model/memory_plan.h"
#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"
#include "engine/util/log.h"
#include "engine/util/test_hooks.h"

namespace spark {

namespace {

class DetokenizerDecoder : public TokenDecoder {
 public:
  DetokenizerDecoder(const Tokenizer& tokenizer, bool skip_special_tokens) : detok_(tokenizer, skip_special_tokens) {}
  std::string push(int32_t token_id) override { return detok_.push(token_id); }
  std::string flush() override { return detok_.flush(); }

 private:
  IncrementalDetokenizer detok_;
};

// The model's EOS ids (config.json / generation_config / GGUF) plus the tokenizer's own.
ModelSpec with_tokenizer_eos(ModelSpec spec, const Tokenizer& tokenizer) {
  const int32_t eos = tokenizer.eos_id();
  auto& ids = spec.eos_token_ids;
  if (eos >= 0 && std::find(ids.begin(), ids.end(), eos) == ids.end()) ids.push_back(eos);
  return spec;
}

constexpr auto kIdleWake = std::chrono::milliseconds(100);

// The context a request may use: model.max_model_len when set (within the model's
// positions, effective_max_model_len), else the model's positions as far as the KV cache
// holds them.
int64_t resolve_max_model_len(const Config& config, const ModelSpec& spec, int64_t num_kv_blocks) {
  const int64_t capacity = num_kv_blocks * config.engine.block_size;
  if (spec.max_position_embeddings <= 0) return config.model.max_model_len > 0 ? config.model.max_model_len : capacity;
  int64_t limit = effective_max_model_len(config, spec);
  // An encoder runs each prompt whole in one step (SchedulerConfig::whole_prompts).
  if (spec.encoder && limit > config.engine.max_num_batched_tokens) {
    if (config.model.max_model_len > 0)
      log_warn("engine: max_model_len is cut to engine.max_num_batched_tokens = ", config.engine.max_num_batched_tokens,
               ": an encoder runs each input whole in one step");
    limit = config.engine.max_num_batched_tokens;
  }
  return config.model.max_model_len > 0 ? limit : std::min(limit, capacity);  // the scheduler checks the cache holds it
}

SchedulerConfig scheduler_config(const EngineConfig& e, const ModelSpec& spec, int64_t max_model_len) {
  SchedulerConfig s;
  s.max_num_seqs = e.max_num_seqs;
  s.max_num_batched_tokens = e.max_num_batched_tokens;
  s.max_model_len = max_model_len;
  s.enable_chunked_prefill = e.enable_chunked_prefill && !spec.encoder;
  s.whole_prompts = spec.encoder;
  return s;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A recurrent layer's state holds the whole prefix at one position: a cached KV prefix
// cannot be reused without the state at its end. Until state checkpoints exist, a model
// with recurrent layers runs without prefix caching. (Drafts it took in are rolled back
// from a snapshot: Batch::state_copies.)
// A model with recurrent layers reuses cached blocks only through state checkpoints.
bool prefix_caching_for(const EngineConfig& e, const ModelSpec& spec) {
  if (e.enable_prefix_caching && spec.has_recurrent_layers() && e.checkpoint_slots() == 0)
    log_warn("engine: prefix caching is off for a model with recurrent layers (", spec.architecture,
             ") without engine.state_checkpoints");
  // An encoder's K and V of a prefix depend on the tokens after it: nothing is reusable.
  if (spec.encoder) return false;
  return e.enable_prefix_caching && (!spec.has_recurrent_layers() || e.checkpoint_slots() > 0);
}

}  // namespace

int64_t state_slots_for(const EngineConfig& e, const ModelSpec& spec, size_t executor_slots) {
  if (!spec.has_recurrent_layers()) return 0;
  const auto slots = static_cast<int64_t>(executor_slots);
  const int64_t running = std::max<int64_t>(1, (e.max_num_seqs + slots - 1) / slots) * slots;
  // With drafts, each running sequence's slot has a snapshot slot, above them all; the
  // checkpoints come last.
  return (e.speculates() ? 2 * running : running) + e.checkpoint_slots();
}

namespace {

// The sliding window the block manager keeps blocks for: the model's, when it has
// sliding-window layers.
int64_t sliding_window_of(const ModelSpec& spec) {
  for (int64_t l = 0; l < spec.num_layers; ++l)
    if (spec.layer_is_sliding(l)) return spec.sliding_window;
  return 0;
}

}  // namespace

Engine::Engine(const Config& config, std::unique_ptr<StepExecutor> executor, const ModelSpec& spec,
               DecoderFactory decoders, int64_t num_kv_blocks, int64_t num_window_blocks)
    : spec_(spec),
      executor_(std::move(executor)),
      decoders_(std::move(decoders)),
      eos_ids_(spec.eos_token_ids),
      admission_(spec.vocab_size, resolve_max_model_len(config, spec, num_kv_blocks)),
      blocks_(num_kv_blocks, config.engine.block_size, prefix_caching_for(config.engine, spec),
              {sliding_window_of(spec), num_window_blocks}),
      speculator_(SpeculationConfig::from(config.engine)) {
  SPARK_CHECK(executor_ != nullptr && decoders_ != nullptr, "an engine needs an executor and a decoder factory");
  // Each micro-batch slot gets its share of the sequences, so that decode-only traffic
  // fills every slot.
  const size_t slots = executor_->num_slots();
  SchedulerConfig sc = scheduler_config(config.engine, spec, admission_.max_model_len());
  sc.max_num_seqs = std::max<int64_t>(1, (sc.max_num_seqs + int64_t(slots) - 1) / int64_t(slots));
  // Recurrent state: each slot's scheduler hands out its own range of state slots.
  const int64_t state_slots = state_slots_for(config.engine, spec, slots);
  const int64_t checkpoints = state_slots > 0 ? config.engine.checkpoint_slots() : 0;
  if (checkpoints > 0)
    checkpoints_ = std::make_unique<StateCheckpoints>(state_slots - checkpoints, checkpoints, blocks_, config.engine.block_size);
  for (size_t i = 0; i < slots; ++i) {
    sc.first_state_slot = state_slots > 0 ? int64_t(i) * sc.max_num_seqs : -1;
    sc.snapshot_offset = state_slots > 0 && speculator_.enabled() ? (state_slots - checkpoints) / 2 : -1;
    schedulers_.push_back(std::make_unique<Scheduler>(sc, blocks_, checkpoints_.get()));
  }
  executor_->prepare(num_kv_blocks, blocks_.num_window_blocks(), config.engine.block_size, eos_ids_, state_slots);
  executor_->set_metrics(&metrics_);
  metrics_.set_gauges(0, 0, 0, num_kv_blocks);
  state_.last_heartbeat = Clock::now();
}

Engine::Engine(const Config& config, std::unique_ptr<StepExecutor> executor, const ModelSpec& spec,
               const Tokenizer& tokenizer, int64_t num_kv_blocks, int64_t num_window_blocks)
    : Engine(config, std::move(executor), with_tokenizer_eos(spec, tokenizer),
             [&tokenizer](bool skip_special) { return std::make_unique<DetokenizerDecoder>(tokenizer, skip_special); },
             num_kv_blocks, num_window_blocks) {}

Engine::Engine(const Config& config, std::unique_ptr<Backend> backend, const ModelSpec& spec, const Tokenizer& tokenizer,
               int64_t num_kv_blocks, int64_t num_window_blocks)
    : Engine(config, std::make_unique<LocalExecutor>(std::move(backend), spec.vocab_size), spec, tokenizer,
             num_kv_blocks, num_window_blocks) {}

Engine::~Engine() { stop(); }

void Engine::attach_drafter(std::unique_ptr<DraftModel> drafter) {
  std::lock_guard lock(mu_);
  SPARK_CHECK(!thread_.joinable() && drafter != nullptr, "a draft model is attached before the engine starts");
  drafter->prepare(blocks_.num_blocks(), blocks_.block_size(),
                   int64_t(schedulers_.size()) * schedulers_.front()->config().max_num_seqs, eos_ids_);
  for (const auto& s : schedulers_) s->set_hidden_for_drafts(speculator_.enabled() && drafter->reads_model_hidden());
  drafter_ = std::move(drafter);
}

void Engine::start() {
  std::lock_guard lock(mu_);
  SPARK_CHECK(!thread_.joinable() && !stopping_, "the engine starts once");
  SPARK_CHECK(!speculator_.drafts_from_model() || drafter_ != nullptr, "drafts from a model without one attached");
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  abort_all();
}

EngineState Engine::state() const {
  std::lock_guard lock(mu_);
  EngineState s = state_;
  s.alive = !dead_ && !stopping_;
  s.reason = dead_ ? dead_reason_ : stopping_ ? "the engine is stopped" : "";
  return s;
}

// ---- request intake (any thread) ---------------------------------------------------

std::shared_ptr<RequestStream> Engine::submit(Request request) {
  const int64_t max_tokens = admission_.check(request.prompt_ids, request.params, request.last_hidden_state);
  auto live = std::make_unique<Live>(Live{
      nullptr, nullptr, decoders_(request.params.skip_special_tokens),
      StopChecker(request.params, eos_ids_, max_tokens), {}});
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mu_);
    if (dead_) throw RuntimeError("the engine has failed and accepts no requests: " + dead_reason_);
    if (stopping_) throw RuntimeError("the engine is shutting down and accepts no requests");
    if (std::string problem = executor_->problem(); !problem.empty()) throw RuntimeError(problem);
    if (request.request_id.empty()) request.request_id = "req-" + std::to_string(next_request_number_++);
    if (live_ids_.count(request.request_id))
      throw InputError("request id '" + request.request_id + "' is already in use by a live request");
    if (!request.params.seed) {
      static thread_local std::mt19937_64 seeds{std::random_device{}()};
      request.params.seed = seeds();
    }
    live->seq = std::make_unique<Sequence>(next_seq_id_++, std::move(request.prompt_ids), std::move(request.params));
    live->seq->request_id = request.request_id;
    live->seq->max_tokens = max_tokens;
    live->seq->returns_hidden = request.last_hidden_state;
    live->timings.queued = Clock::now();
    stream = live->stream = std::make_shared<RequestStream>(request.request_id);
    live_ids_.emplace(request.request_id, stream);
    inbox_.push_back(std::move(live));
  }
  wake_.notify_all();
  return stream;
}

bool Engine::cancel(const std::string& request_id) {
  {
    std::lock_guard lock(mu_);
    if (!live_ids_.count(request_id) || dead_) return false;
    cancels_.push_back(request_id);
  }
  wake_.notify_all();
  return true;
}

// ---- the engine thread -------------------------------------------------------------

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      auto now = Clock::now();
      ++state_.heartbeat;
      state_.last_heartbeat = now;
      state_.idle = inbox_.empty() && !has_work();
      if (!stopping_ && inbox_.empty() && cancels_.empty() && !has_work())
        wake_.wait_for(lock, kIdleWake);
      if (stopping_) return;
    }
    test_hooks::engine_turn();
    try {
      take_inbox();
      turn();
      retire_finished();
      publish_gauges();
    } catch (const std::exception& e) {
      fail_all(e.what());
      return;
    }
  }
}

void Engine::take_inbox() {
  std::deque<std::unique_ptr<Live>> inbox;
  std::vector<std::string> cancels;
  cancels.swap(deferred_cancels_);
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_);
    cancels.insert(cancels.end(), cancels_.begin(), cancels_.end());
    cancels_.clear();
  }
  for (auto& live : inbox) {
    Sequence* seq = live->seq.get();
    seq_of_request_[seq->request_id] = seq->seq_id;
    // The slot with the fewest sequences, so micro-batches stay balanced.
    size_t best = 0, best_load = SIZE_MAX;
    for (size_t i = 0; i < schedulers_.size(); ++i) {
      size_t load = schedulers_[i]->running().size() + schedulers_[i]->waiting().size();
      if (load < best_load) best = i, best_load = load;
    }
    live->slot = best;
    schedulers_[best]->add(seq);
    live_.emplace(seq->seq_id, std::move(*live));
  }
  for (const auto& id : cancels) {
    auto it = seq_of_request_.find(id);
    if (it == seq_of_request_.end()) continue;  // finished in the meantime
    Live& live = live_.at(it->second);
    if (live.in_flight) {  // its step still points at it: end it when that returns
      deferred_cancels_.push_back(id);
      continue;
    }
    finish(live, FinishReason::ABORT, new_output(live));
  }
}

// One turn: every free slot with work launches a step, then the oldest step in flight
// completes. On one box that is schedule -> forward -> sample -> postprocess; in a
// pipeline, one micro-batch computes here while the other is on the peer.
void Engine::turn() {
  const StepExecutor::Readiness r = executor_->readiness();
  if (r.state_lost) {
    if (!r.lost_why.empty()) lose_executor_state(r.lost_why);
    forget_cached();
  }
  if (!r.ready) {
    if (!live_.empty()) lose_executor_state(executor_->problem());
    return;
  }
  try {
    for (size_t slot = 0; slot < schedulers_.size(); ++slot) {
      const bool busy =
          std::any_of(in_flight_.begin(), in_flight_.end(), [slot](const InFlight& f) { return f.slot == slot; });
      if (!busy && schedulers_[slot]->has_work()) launch(slot);
    }
    if (!in_flight_.empty()) complete_oldest();
  } catch (const PeerLost& e) {
    lose_executor_state(e.what());
  }
}

bool Engine::has_work() const {
  if (!in_flight_.empty()) return true;
  for (const auto& s : schedulers_)
    if (s->has_work()) return true;
  return false;
}

// Plans slot's next step and hands it to the executor, visible to the watchdog while the
// executor computes.
void Engine::launch(size_t slot) {
  if (speculator_.enabled()) speculator_.propose(*schedulers_[slot], executor_->rows_at_decode_cost());
  ScheduledStep plan = schedulers_[slot]->schedule();
  if (plan.empty()) {
    // With several slots, another one may hold the blocks this one needs; it frees them.
    SPARK_CHECK(schedulers_.size() > 1, "work is queued but nothing could be scheduled");
    return;
  }
  admit(plan);
  const auto started = Clock::now();
  if (drafter_) drafter_->draft(plan);
  // Only decode steps are timed for the draft cost: a prefill chunk's time is not what a
  // draft saves, nor is the draft's own catch-up on a prompt (once per sequence), which
  // would make drafting look costlier than it is at every step after.
  const bool timed = drafter_ && drafter_->max_catch_up() <= 1 + speculator_.max_drafts() &&
                     std::all_of(plan.entries.begin(), plan.entries.end(),
                                 [](const StepEntry& e) { return e.num_new_tokens == 1 + e.num_draft_tokens; });
  for (const StepEntry& e : plan.entries) live_.at(e.seq->seq_id).in_flight = true;
  in_flight_.push_back({slot, std::move(plan)});
  {
    std::lock_guard lock(mu_);
    state_.step_started = Clock::now();
  }
  executor_->launch(in_flight_.back().plan);
  if (timed) in_flight_.back().seconds = seconds_between(started, Clock::now());
  std::lock_guard lock(mu_);
  state_.step_started = {};
  ++state_.steps;
}

void Engine::complete_oldest() {
  const auto started = Clock::now();
  const StepOutput out = executor_->finish_oldest();
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (f.seconds >= 0) {
    int64_t drafts = 0;
    for (const StepEntry& e : f.plan.entries) drafts += e.num_draft_tokens;
    speculator_.observe_step(int64_t(f.plan.entries.size()), drafts, f.seconds + seconds_between(started, Clock::now()));
  }
  for (const StepEntry& e : f.plan.entries) live_.at(e.seq->seq_id).in_flight = false;
  emit_all(f.slot, f.plan, out);
  if (drafter_) drafter_->observe(f.plan, out.hidden);
}

// First-time bookkeeping for the sequences a plan admits.
void Engine::admit(const ScheduledStep& plan) {
  const auto now = Clock::now();
  for (const StepEntry& e : plan.entries) {
    Live& live = live_.at(e.seq->seq_id);
    if (live.admitted) continue;
    live.admitted = true;
    live.timings.scheduled = now;
    metrics_.observe_queue_time(seconds_between(live.timings.queued, now));
    metrics_.add_prompt_tokens(static_cast<uint64_t>(e.seq->num_prompt_tokens));
  }
}

// Appends slot's sampled tokens (samples[r] belongs to logits row r), counts the step,
// emits the tokens and finishes the sequences whose hidden state came back. Sequences
// that finish stay in live_ until the turn ends.
void Engine::emit_all(size_t slot, const ScheduledStep& plan, const StepOutput& out) {
  const std::vector<SampleOutput>& samples = out.samples;
  if (samples.size() != plan.batch.logits_rows.size())
    throw RuntimeError("the step returned " + std::to_string(samples.size()) + " samples for " +
                       std::to_string(plan.batch.logits_rows.size()) + " logits rows");
  const auto H = static_cast<size_t>(spec_.hidden_size);
  if (out.hidden.size() != plan.batch.hidden_rows.size() * H)
    throw RuntimeError("the step returned " + std::to_string(out.hidden.size()) + " hidden-state values for " +
                       std::to_string(plan.batch.hidden_rows.size()) + " hidden rows");
  std::vector<int32_t> tokens(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) tokens[r] = samples[r].token;
  for (const StepEntry& e : plan.entries)
    if (e.logits_row >= 0 && e.num_draft_tokens == 0)
      tokens[size_t(e.logits_row)] = test_hooks::forced_token(e.seq->num_output_tokens(), tokens[size_t(e.logits_row)]);
  const std::vector<int64_t> appended = schedulers_[slot]->update(plan, tokens);
  count_step();
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const StepEntry& e = plan.entries[i];
    if (e.num_draft_tokens == 0) continue;
    metrics_.add_spec_decode(size_t(e.num_draft_tokens), size_t(appended[i] - 1));
    speculator_.observe(*e.seq, size_t(e.num_draft_tokens), size_t(appended[i] - 1));
  }
  for (const StepEntry& e : plan.entries) {
    if (e.hidden_row < 0) continue;
    Live& live = live_.at(e.seq->seq_id);
    if (live.finished) continue;
    RequestOutput result = new_output(live);
    const auto first = out.hidden.begin() + std::ptrdiff_t(size_t(e.hidden_row) * H);
    result.hidden.assign(first, first + std::ptrdiff_t(H));
    finish(live, FinishReason::STOP, std::move(result));
  }
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const StepEntry& e = plan.entries[i];
    if (e.logits_row < 0) continue;
    Live& live = live_.at(e.seq->seq_id);
    if (live.finished) continue;
    // The step appended m tokens (more than one when drafts were accepted). They go out
    // one at a time, each as the sequence's last token, so that EOS, a stop string or
    // max_tokens ends the request exactly where decoding one token per step would.
    Sequence& seq = *live.seq;
    const auto m = static_cast<size_t>(appended[i]);
    const std::vector<int32_t> tail(seq.token_ids.end() - std::ptrdiff_t(m), seq.token_ids.end());
    seq.token_ids.resize(seq.token_ids.size() - m);
    for (size_t j = 0; j < m && !live.finished; ++j) {
      seq.token_ids.push_back(tail[j]);
      // Counted before the token goes out: a reader that sees a request end sees its
      // tokens in the metrics too.
      metrics_.add_generation_tokens(1);
      try {
        emit_token(live, samples[size_t(e.logits_row) + j]);
      } catch (const std::exception& ex) {  // e.g. a decoder that throws: this request alone fails
        if (!live.finished) finish(live, FinishReason::ERROR, new_output(live), std::string("output failed: ") + ex.what());
      }
    }
  }
}

void Engine::count_step() {
  metrics_.add_step();
  metrics_.add_prefix_cache(static_cast<uint64_t>(blocks_.prefix_cache_queries() - reported_queries_),
                            static_cast<uint64_t>(blocks_.prefix_cache_hits() - reported_hits_));
  reported_queries_ = blocks_.prefix_cache_queries();
  reported_hits_ = blocks_.prefix_cache_hits();
  int64_t preemptions = 0;
  for (const auto& s : schedulers_) preemptions += s->num_preemptions();
  metrics_.add_preemptions(static_cast<uint64_t>(preemptions - reported_preemptions_));
  reported_preemptions_ = preemptions;
}

void Engine::publish_gauges() {
  int64_t running = 0, waiting = 0;
  for (const auto& s : schedulers_) {
    running += static_cast<int64_t>(s->running().size());
    waiting += static_cast<int64_t>(s->waiting().size());
  }
  // Blocks only checkpoints hold are cache, given back on demand, like cached free blocks.
  const int64_t cache_only = checkpoints_ ? checkpoints_->evictable_blocks() : 0;
  metrics_.set_gauges(running, waiting, blocks_.num_used_blocks() - cache_only, blocks_.num_blocks());
}

RequestOutput Engine::new_output(const Live& live) const {
  RequestOutput out;
  const Sequence& seq = *live.seq;
  out.request_id = seq.request_id;
  out.num_prompt_tokens = seq.num_prompt_tokens;
  out.num_cached_tokens = seq.num_cached_tokens;
  out.num_output_tokens = seq.num_output_tokens();
  out.timings = live.timings;
  return out;
}

void Engine::emit_token(Live& live, const SampleOutput& sampled) {
  const Sequence& seq = *live.seq;
  const int32_t token = seq.last_token();
  const int64_t n = seq.num_output_tokens();
  const auto now = Clock::now();
  if (n == 1) {
    live.timings.first_token = now;
    metrics_.observe_ttft(seconds_between(live.timings.queued, now));
  }
  live.timings.last_token = now;

  RequestOutput out = new_output(live);
  out.token_ids.push_back(token);
  out.token_times.push_back(now);
  if (seq.params.logprobs) out.logprobs.push_back({token, sampled.logprob, sampled.top_logprobs});

  const StopChecker::TokenVerdict verdict = live.stop.on_token(token, n);
  if (!verdict.hide_text) out.text = live.stop.on_text(live.decoder->push(token), n);
  bool finished = verdict.finished || live.stop.stopped_by_string();
  if (verdict.finished && !live.stop.stopped_by_string()) {
    // The decoder's held bytes may still complete a stop string.
    out.text += live.stop.on_text(live.decoder->flush(), n);
    if (!live.stop.stopped_by_string()) out.text += live.stop.flush();
  }
  if (!finished) {
    live.stream->push(std::move(out));
    return;
  }
  FinishReason reason = verdict.reason;
  if (live.stop.stopped_by_string()) {
    reason = FinishReason::STOP;
    out.stop_string = live.stop.matched_stop();
  } else {
    out.stop_token = verdict.stop_token;
  }
  finish(live, reason, std::move(out));
}

void Engine::finish(Live& live, FinishReason reason, RequestOutput out, const std::string& error) {
  Sequence& seq = *live.seq;
  schedulers_[live.slot]->finish(&seq, reason);
  seq.status = SeqStatus::FINISHED;  // also for sequences still in the inbox (never added)
  seq.finish_reason = reason;
  publish_gauges();  // a reader woken by the final output sees the blocks already freed
  const auto now = Clock::now();
  live.timings.finished = now;
  out.timings = live.timings;
  out.finished = true;
  out.finish_reason = reason;
  out.error = error;
  metrics_.request_finished(reason);
  metrics_.observe_e2e(seconds_between(live.timings.queued, now));
  if (seq.num_output_tokens() >= 2)
    metrics_.observe_tpot(seconds_between(live.timings.first_token, live.timings.last_token) /
                          static_cast<double>(seq.num_output_tokens() - 1));
  {
    std::lock_guard lock(mu_);
    live_ids_.erase(seq.request_id);  // before the final output: its reader sees it gone
  }
  live.stream->push(std::move(out));
  seq_of_request_.erase(seq.request_id);
  live.finished = true;
  finished_.push_back(seq.seq_id);
}

void Engine::retire_finished() {
  for (int64_t seq_id : finished_) {
    live_.erase(seq_id);
    speculator_.retire(seq_id);
    if (drafter_) drafter_->retire(seq_id);
    executor_->retire(seq_id);
  }
  finished_.clear();
}

void Engine::lose_executor_state(const std::string& why) {
  if (!live_.empty()) log_error("the pipeline lost its state with ", live_.size() - finished_.size(), " requests live: ", why);
  end_all(FinishReason::ERROR, why, false);
  executor_->forget_all();
  if (drafter_) drafter_->forget_all();
  forget_cached();
  publish_gauges();
}

void Engine::forget_cached() {
  blocks_.forget_cached();
  if (checkpoints_) checkpoints_->forget_all();
}

void Engine::fail_all(const std::string& error) { end_all(FinishReason::ERROR, "engine step failed: " + error, true); }

void Engine::abort_all() { end_all(FinishReason::ABORT, "", false); }

// Ends every request the engine knows of, queued ones included, in submission order.
// engine_dead also marks the engine dead, under the lock, so no new request slips in after.
void Engine::end_all(FinishReason reason, const std::string& error, bool engine_dead) {
  std::deque<std::unique_ptr<Live>> inbox;
  in_flight_.clear();  // their plans point at sequences about to end
  deferred_cancels_.clear();
  {
    std::lock_guard lock(mu_);
    if (engine_dead) {
      dead_ = true;
      dead_reason_ = error;
    }
    inbox.swap(inbox_);
    cancels_.clear();
  }
  for (auto& live : inbox) {
    seq_of_request_[live->seq->request_id] = live->seq->seq_id;
    live_.emplace(live->seq->seq_id, std::move(*live));
  }
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (int64_t id : ids) {
    Live& live = live_.at(id);
    if (!live.finished) finish(live, reason, new_output(live), error);
  }
  retire_finished();
  publish_gauges();
}

}  // namespace spark
