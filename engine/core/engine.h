// engine.h — the inference engine: one thread running schedule -> execute -> postprocess,
// with thread-safe submit/cancel and a per-request output stream.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/core/admission.h"
#include "engine/core/block_manager.h"
#include "engine/core/draft_model.h"
#include "engine/core/metrics.h"
#include "engine/core/request_stream.h"
#include "engine/core/scheduler.h"
#include "engine/core/speculator.h"
#include "engine/core/step_executor.h"
#include "engine/core/stop.h"
#include "engine/model/model_spec.h"

namespace spark {

class Tokenizer;

struct Request {
  std::string request_id;  // unique among live requests; empty: the engine assigns one
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  // Runs the prompt only and finishes with the final hidden state of its pooled token
  // (RequestOutput::hidden): a decoder's last, an encoder's first (SchedulerConfig::whole_prompts),
  // for embeddings and scoring.
  bool last_hidden_state = false;
};

// Turns a request's output ids into text incrementally: deltas never split a UTF-8
// character and their concatenation equals the full decode.
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::string push(int32_t token_id) = 0;
  virtual std::string flush() = 0;
};
using DecoderFactory = std::function<std::unique_ptr<TokenDecoder>(bool skip_special_tokens)>;

// The recurrent state slots an engine keeps for a model (0 without recurrent layers): each
// executor slot's scheduler runs its share of engine.max_num_seqs, rounded up, and holds a
// state slot per running sequence; with speculation, a snapshot slot for each as well
// (Batch::state_copies); then the state checkpoints (EngineConfig::checkpoint_slots). A
// pipeline's head tells its worker this count.
int64_t state_slots_for(const EngineConfig& engine, const ModelSpec& spec, size_t executor_slots);

// What the health endpoint and the service watchdog read.
struct EngineState {
  bool alive = true;       // false after a backend failure or stop(); `reason` says which
  std::string reason;
  uint64_t heartbeat = 0;  // advances on every loop turn, at least every 100 ms when idle
  uint64_t steps = 0;      // forward passes run
  bool idle = true;        // nothing waiting or running
  Clock::time_point last_heartbeat;
  Clock::time_point step_started;  // set while a forward pass runs, else {}
};

class Engine {
 public:
  // Text comes from the tokenizer's IncrementalDetokenizer; EOS ids from the spec and
  // the tokenizer. The tokenizer must outlive the engine. The executor runs the steps:
  // a LocalExecutor over a backend on one box, a pipeline over the peer link on two (each
  // sequence then stays in one micro-batch slot for its whole life).
  Engine(const Config& config, std::unique_ptr<StepExecutor> executor, const ModelSpec& spec,
         const Tokenizer& tokenizer, int64_t num_kv_blocks, int64_t num_window_blocks = 0);
  // The same with any decoder (tests).
  Engine(const Config& config, std::unique_ptr<StepExecutor> executor, const ModelSpec& spec, DecoderFactory decoders,
         int64_t num_kv_blocks, int64_t num_window_blocks = 0);
  // One box: a LocalExecutor over `backend`. num_window_blocks: the blocks that hold the
  // sliding-window layers too (MemoryPlan::kv_window_blocks); 0: every block does.
  Engine(const Config& config, std::unique_ptr<Backend> backend, const ModelSpec& spec, const Tokenizer& tokenizer,
         int64_t num_kv_blocks, int64_t num_window_blocks = 0);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // speculative = "draft": the draft model that fills the drafts, its KV cache sized like
  // the engine's; before start().
  void attach_drafter(std::unique_ptr<DraftModel> drafter);
  void start();  // starts the engine thread; requests submitted before wait for it
  // Stops the thread after the current step; requests still live finish with "abort".
  void stop();

  // Admits the request (admission(): prompt ids, sampling params, prompt + max_tokens vs
  // max_model_len; InputError naming the problem), refuses a duplicate id, and queues it.
  // Throws RuntimeError when the engine is dead or stopped. Thread-safe.
  std::shared_ptr<RequestStream> submit(Request request);
  // Aborts a waiting or running request; its KV blocks are freed before the next step
  // and its stream ends with "abort". False when no such request is live. Thread-safe.
  bool cancel(const std::string& request_id);

  MetricsSnapshot metrics() const { return metrics_.snapshot(); }
  // The registry itself, for what the API layer measures (structured-output compiles).
  Metrics& metrics_registry() { return metrics_; }
  EngineState state() const;
  const Admission& admission() const { return admission_; }
  int64_t max_model_len() const { return admission_.max_model_len(); }
  int64_t vocab_size() const { return spec_.vocab_size; }
  int64_t num_kv_blocks() const { return blocks_.num_blocks(); }
  const std::vector<int32_t>& eos_token_ids() const { return eos_ids_; }

 private:
  struct Live {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<TokenDecoder> decoder;
    StopChecker stop;
    RequestTimings timings;
    bool admitted = false;
    bool finished = false;   // its final output is out; retired at the end of the turn
    size_t slot = 0;         // its scheduler (micro-batch slot)
    bool in_flight = false;  // in a step the executor has not finished yet
  };
  struct InFlight {
    size_t slot = 0;
    ScheduledStep plan;
    // With a draft model, a decode-only step's time from its first draft forward through
    // the executor (the engine thread's share of it); -1 for other steps.
    double seconds = -1;
  };

  void loop();
  void take_inbox();
  void turn();
  bool has_work() const;
  void launch(size_t slot);
  void complete_oldest();
  void admit(const ScheduledStep& plan);
  void count_step();
  void emit_all(size_t slot, const ScheduledStep& plan, const StepOutput& out);
  void emit_token(Live& live, const SampleOutput& sampled);
  void finish(Live& live, FinishReason reason, RequestOutput out, const std::string& error = {});
  void retire_finished();
  void lose_executor_state(const std::string& why);
  void fail_all(const std::string& error);
  void abort_all();
  void end_all(FinishReason reason, const std::string& error, bool engine_dead);
  void publish_gauges();
  void forget_cached();  // the cached blocks and state checkpoints, when the states are lost
  RequestOutput new_output(const Live& live) const;

  const ModelSpec spec_;
  std::unique_ptr<StepExecutor> executor_;
  DecoderFactory decoders_;
  std::vector<int32_t> eos_ids_;
  Admission admission_;
  BlockManager blocks_;
  std::unique_ptr<StateCheckpoints> checkpoints_;  // a model with recurrent layers; shared by the slots
  std::vector<std::unique_ptr<Scheduler>> schedulers_;  // one per micro-batch slot
  Speculator speculator_;
  std::unique_ptr<DraftModel> drafter_;  // speculative = "draft"
  Metrics metrics_;
  int64_t next_seq_id_ = 1;  // guarded by mu_
  std::unordered_map<int64_t, Live> live_;  // by seq id; engine thread only
  std::unordered_map<std::string, int64_t> seq_of_request_;  // engine thread only
  std::vector<int64_t> finished_;  // finished this turn, retired at its end
  int64_t reported_queries_ = 0, reported_hits_ = 0, reported_preemptions_ = 0;
  std::deque<InFlight> in_flight_;             // oldest first
  std::vector<std::string> deferred_cancels_;  // cancels of sequences in flight

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Live>> inbox_;
  std::vector<std::string> cancels_;
  std::unordered_map<std::string, std::shared_ptr<RequestStream>> live_ids_;  // every live request
  uint64_t next_request_number_ = 1;
  bool stopping_ = false;
  bool dead_ = false;
  std::string dead_reason_;
  EngineState state_;
  std::thread thread_;
};

}  // namespace spark
