// engine.cpp — the engine thread's step loop, request intake, output emission and
// failure handling.
#include "engine/core/engine.h"

#include <algorithm>
#include <random>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"

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

int64_t resolve_max_model_len(const Config& config, const ModelSpec& spec, int64_t num_kv_blocks) {
  const int64_t capacity = num_kv_blocks * config.engine.block_size;
  const int64_t model_limit = spec.max_position_embeddings;
  if (config.model.max_model_len > 0) {
    if (model_limit > 0 && config.model.max_model_len > model_limit)
      throw InputError("model.max_model_len (" + std::to_string(config.model.max_model_len) +
                       ") is larger than the model's max_position_embeddings (" + std::to_string(model_limit) + ")");
    return config.model.max_model_len;  // the scheduler checks that the KV cache holds it
  }
  return model_limit > 0 ? std::min(model_limit, capacity) : capacity;
}

SchedulerConfig scheduler_config(const EngineConfig& e, int64_t max_model_len) {
  SchedulerConfig s;
  s.max_num_seqs = e.max_num_seqs;
  s.max_num_batched_tokens = e.max_num_batched_tokens;
  s.max_model_len = max_model_len;
  s.enable_chunked_prefill = e.enable_chunked_prefill;
  return s;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Engine::Engine(const Config& config, std::unique_ptr<Backend> backend, const ModelSpec& spec, DecoderFactory decoders,
               int64_t num_kv_blocks, RemoteStage* remote)
    : spec_(spec),
      backend_(std::move(backend)),
      decoders_(std::move(decoders)),
      eos_ids_(spec.eos_token_ids),
      max_model_len_(resolve_max_model_len(config, spec, num_kv_blocks)),
      blocks_(num_kv_blocks, config.engine.block_size, config.engine.enable_prefix_caching),
      sampler_(spec.vocab_size, spec.eos_token_ids),
      remote_(remote) {
  SPARK_CHECK(backend_ != nullptr && decoders_ != nullptr, "an engine needs a backend and a decoder factory");
  // Two micro-batch slots with a remote stage, so both boxes compute at once; each gets
  // half the sequences so that decode-only traffic fills both.
  const size_t slots = remote_ ? 2 : 1;
  SchedulerConfig sc = scheduler_config(config.engine, max_model_len_);
  sc.max_num_seqs = std::max<int64_t>(1, (sc.max_num_seqs + int64_t(slots) - 1) / int64_t(slots));
  for (size_t i = 0; i < slots; ++i) schedulers_.push_back(std::make_unique<Scheduler>(sc, blocks_));
  backend_->init_kv_cache(num_kv_blocks, config.engine.block_size);
  metrics_.set_gauges(0, 0, 0, num_kv_blocks);
  state_.last_heartbeat = Clock::now();
}

Engine::Engine(const Config& config, std::unique_ptr<Backend> backend, const ModelSpec& spec, const Tokenizer& tokenizer,
               int64_t num_kv_blocks, RemoteStage* remote)
    : Engine(config, std::move(backend), with_tokenizer_eos(spec, tokenizer),
             [&tokenizer](bool skip_special) { return std::make_unique<DetokenizerDecoder>(tokenizer, skip_special); },
             num_kv_blocks, remote) {}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard lock(mu_);
  SPARK_CHECK(!thread_.joinable() && !stopping_, "the engine starts once");
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
  const auto& ids = request.prompt_ids;
  if (ids.empty()) throw InputError("the prompt is empty: at least one token is needed");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= spec_.vocab_size)
      throw InputError("prompt token " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                       " is outside the vocabulary [0, " + std::to_string(spec_.vocab_size) + ")");
  request.params.validate(spec_.vocab_size);
  const int64_t max_tokens = schedulers_[0]->resolve_max_tokens(static_cast<int64_t>(ids.size()), request.params);

  auto live = std::make_unique<Live>(Live{
      nullptr, nullptr, decoders_(request.params.skip_special_tokens),
      StopChecker(request.params, eos_ids_, max_tokens), {}, false});
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mu_);
    if (dead_) throw RuntimeError("the engine has failed and accepts no requests: " + dead_reason_);
    if (stopping_) throw RuntimeError("the engine is shutting down and accepts no requests");
    if (remote_)
      if (std::string problem = remote_->problem(); !problem.empty()) throw RuntimeError(problem);
    if (remote_ && request.params.constraint)
      throw InputError("structured outputs are not available in peer mode yet (the worker samples)");
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
    try {
      take_inbox();
      if (remote_) pipeline_turn();
      else if (has_work()) step();
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
    if (live.in_flight) {  // its micro-batch still points at it: end it when that returns
      deferred_cancels_.push_back(id);
      continue;
    }
    finish(live, FinishReason::ABORT, new_output(live));
  }
}

bool Engine::has_work() const {
  if (!in_flight_.empty()) return true;
  for (const auto& s : schedulers_)
    if (s->has_work()) return true;
  return false;
}

// The backend's forward pass, visible to the watchdog while it runs.
void Engine::run_forward(const std::function<void()>& forward) {
  {
    std::lock_guard lock(mu_);
    state_.step_started = Clock::now();
  }
  forward();
  std::lock_guard lock(mu_);
  state_.step_started = {};
  ++state_.steps;
}

void Engine::run_forward(const Batch& batch, ForwardResult& result) {
  run_forward([&] { backend_->forward(batch, nullptr, result); });
}

// First-time bookkeeping for the sequences a plan admits.
void Engine::admit(const ScheduledStep& plan) {
  const auto now = Clock::now();
  for (Sequence* seq : plan.seqs) {
    Live& live = live_.at(seq->seq_id);
    if (live.admitted) continue;
    live.admitted = true;
    live.timings.scheduled = now;
    metrics_.observe_queue_time(seconds_between(live.timings.queued, now));
    metrics_.add_prompt_tokens(static_cast<uint64_t>(seq->num_prompt_tokens));
  }
}

void Engine::step() {
  Scheduler& scheduler = *schedulers_[0];
  ScheduledStep plan = scheduler.schedule();
  SPARK_CHECK(!plan.empty(), "work is queued but nothing could be scheduled");
  admit(plan);

  const size_t rows = plan.batch.logits_rows.size();
  std::vector<SampleOutput> samples(rows);
  // A structured-output row is masked by its grammar on the host: such a step returns
  // logits and samples here.
  const bool constrained = std::any_of(plan.seqs.begin(), plan.seqs.end(), [](const Sequence* s) { return s->matcher != nullptr; });
  if (backend_->samples_on_device() && !constrained) {
    std::vector<SampleRow> requests(rows);
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      const int32_t row = plan.logits_index[i];
      if (row < 0) continue;
      const Sequence& seq = *plan.seqs[i];
      requests[size_t(row)] = {&seq.params, seq.token_ids, seq.num_prompt_tokens, seq.seed,
                               static_cast<uint64_t>(seq.num_output_tokens())};
    }
    run_forward([&] { backend_->forward_sample(plan.batch, nullptr, requests, samples); });
    emit_all(0, plan, samples);
    return;
  }

  ForwardResult result;
  run_forward(plan.batch, result);
  const auto vocab = static_cast<size_t>(spec_.vocab_size);
  if (result.logits.size() != rows * vocab)
    throw RuntimeError("the backend returned " + std::to_string(result.logits.size()) + " logits, expected " +
                       std::to_string(rows) + " rows x " + std::to_string(vocab));
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const int32_t row = plan.logits_index[i];
    if (row >= 0) samples[row] = sampler_.sample(result.logits.data() + static_cast<size_t>(row) * vocab, *plan.seqs[i]);
  }
  emit_all(0, plan, samples);
}

// Appends slot's sampled tokens (samples[r] belongs to logits row r), emits them, and
// counts the step.
void Engine::emit_all(size_t slot, const ScheduledStep& plan, const std::vector<SampleOutput>& samples) {
  std::vector<int32_t> tokens(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) tokens[r] = samples[r].token;
  schedulers_[slot]->update(plan, tokens);
  // Ids first: emitting may finish a sequence, and its Sequence dies with it.
  std::vector<std::pair<int64_t, int32_t>> emits;
  for (size_t i = 0; i < plan.seqs.size(); ++i)
    if (plan.logits_index[i] >= 0) emits.emplace_back(plan.seqs[i]->seq_id, plan.logits_index[i]);
  for (const auto& [seq_id, row] : emits) {
    Live& live = live_.at(seq_id);
    try {
      emit_token(live, samples[size_t(row)]);
    } catch (const std::exception& e) {  // e.g. a decoder that throws: this request alone fails
      if (live_.count(seq_id)) finish(live, FinishReason::ERROR, new_output(live), std::string("output failed: ") + e.what());
    }
  }
  count_step();
  metrics_.add_generation_tokens(samples.size());
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
  metrics_.set_gauges(running, waiting, blocks_.num_used_blocks(), blocks_.num_blocks());
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
  if (live.opened) pending_closes_.push_back(seq.seq_id);
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
  const int64_t seq_id = seq.seq_id;
  seq_of_request_.erase(seq.request_id);
  live_.erase(seq_id);  // `live` dies here
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
    finish(live, reason, new_output(live), error);
  }
  publish_gauges();
}

}  // namespace spark
