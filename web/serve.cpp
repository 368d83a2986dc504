// serve.cpp — `sparkd serve`: load, listen, tell systemd, drain on SIGTERM/SIGINT.
#include "web/serve.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/backend/box_plan.h"
#include "engine/backend/stage_loader.h"
#include "engine/config.h"
#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/peer/head.h"
#include "engine/peer/link.h"
#include "engine/peer/model_identity.h"
#include "engine/peer/pipeline_executor.h"
#include "engine/peer/worker.h"
#include "engine/model/pooling.h"
#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"
#include "engine/util/log.h"
#include "engine/util/sd_notify.h"
#include "engine/util/test_hooks.h"
#include "engine/util/version.h"
#include "web/app.h"
#include "web/chat_prompt.h"
#include "web/connection.h"
#include "web/model_router.h"
#include "web/routes.h"
#include "web/server.h"

namespace spark {
namespace {

// Waits for SIGTERM/SIGINT on a thread of its own (the signals are blocked everywhere
// else): the first starts the drain, a second exits at once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the process
    thread_ = std::thread([this] { loop(); });
    thread_.detach();
  }
  // Blocks until the first signal; returns its name.
  std::string wait_first() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return got_ != 0; });
    return got_ == SIGTERM ? "SIGTERM" : "SIGINT";
  }

 private:
  void loop() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      std::lock_guard lock(mu_);
      if (got_ != 0) {
        log_warn("second signal: exiting now without finishing in-flight requests");
        _exit(1);
      }
      got_ = sig;
      cv_.notify_all();
    }
  }
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  int got_ = 0;
  std::thread thread_;
};

// A loop turn that takes longer than this means the engine is wedged (a step of the
// largest batch takes well under it on every supported backend).
constexpr auto kEngineStallLimit = std::chrono::seconds(60);

// "" while the engine loop is alive and turning, else why not.
std::string engine_problem(const Engine& engine) {
  EngineState s = engine.state();
  if (!s.alive) return "the engine is down: " + s.reason;
  auto age = Clock::now() - s.last_heartbeat;
  if (age > test_hooks::engine_stall_limit(kEngineStallLimit))
    return "the engine loop has not advanced for " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(age).count()) + " s";
  return "";
}

// Sends WATCHDOG=1 at half the interval systemd asked for, but only while the engine loop's
// heartbeat is fresh: a wedged engine stops the pings and systemd restarts the service.
// Pings start with the engine (after READY=1); draining keeps pinging: the engine works.
// `engines_problem` is asked only once `loaded` is set.
void start_watchdog(ServerState& state, const std::atomic<bool>& loaded, std::function<std::string()> engines_problem,
                    std::atomic<bool>& stop) {
  auto interval = sd_watchdog_interval();
  if (interval.count() == 0) return;
  std::thread([&state, &loaded, engines_problem, &stop, interval] {
    while (!stop.load()) {
      if (loaded.load() && state.status() != ServeStatus::DEAD && engines_problem().empty()) sd_notify("WATCHDOG=1");
      std::this_thread::sleep_for(interval / 2);
    }
  }).detach();
}

// Everything a loaded model consists of; lives until the server has stopped.
struct LoadedParts {
  std::unique_ptr<LoadedStage> stage;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<PoolingModel> pooling;  // an embedder or reranker
  std::unique_ptr<PeerHead> peer;  // peer mode: declared before the engine, which uses it
  std::unique_ptr<Engine> engine;
  std::string backend_description;  // for the dashboard
  uint64_t weight_bytes = 0, kv_cache_bytes = 0, state_bytes = 0;
};

// The head's side of a pair: listens for the worker, which must agree on everything in
// the identity; the session limits bound every frame the worker may send or expect.
std::unique_ptr<PeerHead> start_peer_head(const Config& config, const StagePlan& plan, int64_t blocks,
                                          int64_t window_blocks) {
  if (config.peer.transport == "nccl") require_nccl();
  const ModelSpec& spec = plan.info.spec;
  const PeerIdentity id = local_identity(config, plan, blocks);
  Welcome limits;
  limits.kv_blocks = blocks;
  limits.window_blocks = window_blocks;
  limits.state_slots = state_slots_for(config.engine, spec, PipelineExecutor::kMicroBatches);
  limits.block_size = config.engine.block_size;
  limits.max_step_tokens = config.engine.max_num_batched_tokens;
  limits.max_step_seqs = config.engine.max_num_seqs;
  limits.max_model_len = blocks * config.engine.block_size;  // no context outgrows the cache
  limits.vocab_size = spec.vocab_size;
  limits.hidden_size = spec.hidden_size;
  limits.eos_token_ids = spec.eos_token_ids;
  auto head = std::make_unique<PeerHead>(config.peer, id, limits);
  head->start();
  return head;
}

// `config` is the model's own (model_run_config) and `stage_plan` its part of the box's plan.
std::unique_ptr<LoadedParts> load_parts(const Config& config, StagePlan stage_plan) {
  auto parts = std::make_unique<LoadedParts>();
  parts->stage = load_stage(config, std::move(stage_plan));
  const StagePlan& stage = parts->stage->plan;
  const ModelInfo& info = stage.info;
  const MemoryPlan& plan = stage.memory;
  parts->tokenizer = Tokenizer::load(info.tokenizer_path);
  // Its errors name it: the path alone may read as the model's. (An MTP head and Gemma 4's
  // assistant read the model's own embedding: no tokenizer of their own.)
  if (stage.draft && !stage.draft->spec.mtp_head && !stage.draft->spec.is_assistant()) {
    try {
      require_same_vocabulary(*parts->tokenizer, *Tokenizer::load(stage.draft->tokenizer_path));
    } catch (const InputError& e) {
      throw InputError("engine.speculative_model: " + std::string(e.what()));
    }
  }
  if (config.model.pools()) {
    const Tokenizer& tokenizer = *parts->tokenizer;
    parts->pooling = std::make_unique<PoolingModel>(
        read_pooling_model(info, [&tokenizer](const std::string& t) { return tokenizer.token_id(t); }));
    log_info("serving ", config.model.role == "embed" ? "embeddings" : "rerank scores", " (", pooling_name(parts->pooling->pooling),
             "-token pooling", parts->pooling->normalize ? ", L2-normalised" : "", ")");
  } else {
    try {
      parts->chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_model(info.path, info.chat_template_path));
    } catch (const InputError& e) {
      log_warn("no chat template (", e.what(), "): /v1/chat/completions will refuse requests");
    }
  }
  const int64_t blocks = kv_blocks_to_allocate(config, plan);
  const int64_t window_blocks = std::min(plan.kv_window_blocks, blocks);
  log_info("memory plan of ", served_model_name(config.model), ":\n", describe_plan(plan), "  kv blocks used   ", blocks, " (",
           format_bytes(kv_cache_bytes(plan, blocks)), ")");
  parts->backend_description = parts->stage->backend->describe();
  parts->weight_bytes = plan.weight_bytes + plan.draft_weight_bytes;  // with a draft model, both
  parts->kv_cache_bytes = kv_cache_bytes(plan, blocks);
  parts->state_bytes = plan.state_bytes_per_sequence * uint64_t(plan.state_slots);
  std::unique_ptr<StepExecutor> executor;
  if (config.peer.enabled) {
    parts->peer = start_peer_head(config, stage, blocks, window_blocks);
    executor = std::make_unique<PipelineExecutor>(std::move(parts->stage->backend), *parts->peer, info.spec.hidden_size,
                                                  info.spec.vocab_size);
  } else {
    executor = std::make_unique<LocalExecutor>(std::move(parts->stage->backend), info.spec.vocab_size);
  }
  parts->engine = std::make_unique<Engine>(config, std::move(executor), info.spec, *parts->tokenizer, blocks, window_blocks);
  if (parts->stage->draft_backend) {
    const ModelInfo& draft = *stage.draft;
    log_info("speculative decoding with ",
             draft.spec.mtp_head         ? std::string("the model's MTP head")
             : draft.spec.is_assistant() ? "Gemma 4's assistant " + draft.path
                                         : "the draft model " + draft.path,
             " (", draft.spec.architecture, ", ", parts->stage->draft_backend->describe(), ")");
    parts->engine->attach_drafter(std::make_unique<DraftModel>(std::move(parts->stage->draft_backend), draft.spec,
                                                               config.engine.max_num_batched_tokens));
  }
  parts->engine->start();
  return parts;
}

// The worker serves no HTTP: it runs the head's micro-batches until a signal stops it.
int serve_worker(const Config& config) {
  if (config.peer.transport == "nccl") require_nccl();
  // Never destroyed: the thread waiting for a signal may still block on them at exit
  // (destroying a condition variable with a waiter blocks).
  auto* signals = new SignalWatcher;
  auto* stop = new std::atomic<bool>(false);
  std::thread([signals, stop] {
    std::string sig = signals->wait_first();
    log_info(sig, " received: the worker stops");
    *stop = true;
  }).detach();
  int rc = run_worker(config, *stop);
  log_info("stopped");
  return rc;
}

// One served model: its Config (model_run_config), the App its requests run with, and its
// loaded parts. Held by pointer: the App refers to the Config beside it.
struct ServedModel {
  Config config;
  std::unique_ptr<App> app;
  std::unique_ptr<LoadedParts> parts;
};

void attach(App& app, LoadedParts& parts) {
  app.engine = parts.engine.get();
  app.tokenizer = parts.tokenizer.get();
  app.chat_template = parts.chat_template.get();
  app.pooling = parts.pooling.get();
  app.created = static_cast<int64_t>(std::time(nullptr));
  app.backend_description = parts.backend_description;
  app.weight_bytes = parts.weight_bytes;
  app.kv_cache_bytes = parts.kv_cache_bytes;
  app.state_bytes = parts.state_bytes;
  app.peer = parts.peer.get();
  detect_model_traits(app);
}

// "" while every engine (and a pair's peer) is alive, else the first problem, naming its
// model when there are several.
std::string engines_problem(const std::vector<std::unique_ptr<ServedModel>>& served) {
  for (const auto& m : served) {
    std::string problem = engine_problem(*m->parts->engine);
    if (problem.empty() && m->parts->peer) problem = m->parts->peer->problem();
    if (!problem.empty()) return served.size() > 1 ? "model '" + m->app->model_id + "': " + problem : problem;
  }
  return "";
}

}  // namespace

int run_serve(const Args& args) {
  Flags flags(args);
  flags.expect_only({"config", "set"});
  Config config = load_config(flags.require("config"), flags.get_all("set"));
  log_configure(config.log.level, config.log.format);
  log_info("sparkd ", version_string(), " starting with ", config.source);
  // A pair serves one model (validated); its memory_share, if any, applies on both boxes.
  if (config.peer.enabled && config.peer.role == "worker") return serve_worker(model_run_config(config, 0));

  raise_open_file_limit();
  SignalWatcher signals;  // before any thread starts, so every thread inherits the mask
  ServerState state;
  HttpServer http(config.server, state);
  std::vector<std::unique_ptr<ServedModel>> served;
  std::vector<App*> apps;
  std::string names;
  for (size_t i = 0; i < config.models.size(); ++i) {
    auto m = std::make_unique<ServedModel>();
    m->config = model_run_config(config, i);
    m->app.reset(new App{m->config, state, http, served_model_name(m->config.model)});
    apps.push_back(m->app.get());
    names += (names.empty() ? "" : ", ") + m->app->model_id;
    served.push_back(std::move(m));
  }
  ModelRouter router(apps);
  http.add_routes(make_routes(router));
  int port = http.bind();
  http.start();
  log_info("listening on http://", config.server.host, ":", port, " (503 until the model is loaded)");
  std::atomic<bool> loaded{false};
  std::atomic<bool> stop_watchdog{false};
  start_watchdog(state, loaded, [&served] { return engines_problem(served); }, stop_watchdog);

  try {
    test_hooks::model_load();
    // Every model is planned, and the plans checked, before any weight loads: a set that
    // does not fit is refused naming the model, with nothing allocated.
    std::vector<ModelPlan> plans = plan_box(config);
    require_box_fits(plans);
    for (size_t i = 0; i < served.size(); ++i) {
      auto started = std::chrono::steady_clock::now();
      served[i]->parts = load_parts(served[i]->config, std::move(plans[i].stage));
      log_info("model ", served[i]->app->model_id, " (", served[i]->config.model.role, ") loaded in ",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), " s");
    }
  } catch (...) {
    stop_watchdog = true;
    http.stop();
    throw;
  }
  for (auto& m : served) attach(*m->app, *m->parts);
  state.set_liveness([&served] { return engines_problem(served); });
  loaded = true;

  state.set(ServeStatus::READY);
  sd_notify("READY=1\nSTATUS=serving " + names + " on port " + std::to_string(port));

  std::string sig = signals.wait_first();
  log_info(sig, " received: draining (", state.in_flight(), " requests in flight, up to ",
           config.server.drain_timeout_s, " s)");
  state.set(ServeStatus::DRAINING, "draining: the server is shutting down");
  sd_notify("STOPPING=1\nSTATUS=draining");
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(int64_t(config.server.drain_timeout_s * 1000));
  if (!state.wait_idle(deadline)) {
    log_warn("drain timeout: ", state.in_flight(), " requests still in flight are cut off");
    // Stopping the engines ends every live request ("abort"), so their handlers answer
    // and return instead of holding the HTTP workers that stop() joins.
    for (auto& m : served) m->parts->engine->stop();
    state.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  http.stop();
  stop_watchdog = true;
  for (auto& m : served) m->parts->engine->stop();
  // The dashboard's sampler (owned by the first model's App) reads every model: it stops
  // before any of them goes.
  served.front()->app->dashboard.reset();
  log_info("stopped");
  return 0;
}

}  // namespace spark
