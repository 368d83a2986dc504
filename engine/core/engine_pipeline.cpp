// engine_pipeline.cpp — the head's step loop in peer mode: each micro-batch slot runs
// its layers here and goes to the remote stage; while the worker computes one, this box
// computes the other. A lost peer fails the live requests, not the engine.
#include <algorithm>

#include "engine/core/engine.h"
#include "engine/util/check.h"
#include "engine/util/log.h"

namespace spark {

void Engine::pipeline_turn() {
  const uint64_t session = remote_->session();
  if (session != remote_session_) {
    // A new pairing (or none): the old worker's KV and sequences are gone, so every
    // request that ran there fails, and no cached prefix may be trusted any more.
    // Requests not yet sent anywhere simply run on the new pairing.
    bool ran_there = !in_flight_.empty() ||
                     std::any_of(live_.begin(), live_.end(), [](const auto& entry) { return entry.second.opened; });
    if (ran_there) peer_lost(session == 0 ? remote_->problem() : "the peer worker re-paired");
    pending_closes_.clear();
    blocks_.forget_cached();
    remote_session_ = session;
  }
  if (session == 0) {
    if (!live_.empty()) peer_lost(remote_->problem());
    return;
  }
  try {
    for (size_t slot = 0; slot < schedulers_.size(); ++slot) {
      bool busy = std::any_of(in_flight_.begin(), in_flight_.end(), [slot](const InFlight& f) { return f.slot == slot; });
      if (!busy && schedulers_[slot]->has_work()) launch(slot);
    }
    if (!in_flight_.empty()) complete();
  } catch (const PeerLost& e) {
    peer_lost(e.what());
  }
}

void Engine::launch(size_t slot) {
  ScheduledStep plan = schedulers_[slot]->schedule();
  if (plan.empty()) return;  // the other slot holds the blocks this one needs; it frees them
  admit(plan);

  const int64_t start_us = wall_us();
  ForwardResult result;
  run_forward(plan.batch, result);
  const int64_t end_us = wall_us();
  SPARK_CHECK(result.hidden.size() == size_t(plan.batch.num_tokens()) * size_t(spec_.hidden_size),
              "a first pipeline stage returns hidden states for every row");

  MicroBatchPlan mb;
  mb.id = next_plan_id_++;
  mb.closes.swap(pending_closes_);
  mb.sample_seq_ids.assign(plan.batch.logits_rows.size(), 0);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& seq = *plan.seqs[i];
    Live& live = live_.at(seq.seq_id);
    live.in_flight = true;
    if (!live.opened) {
      live.opened = true;
      mb.opens.push_back({seq.seq_id, seq.num_prompt_tokens, seq.seed, seq.params, seq.token_ids});
    }
    if (plan.logits_index[i] >= 0) mb.sample_seq_ids[size_t(plan.logits_index[i])] = seq.seq_id;
  }
  mb.batch = plan.batch;
  in_flight_.push_back({slot, std::move(plan), mb.id});
  remote_->send(remote_session_, mb, result.hidden, start_us, end_us);
}

void Engine::complete() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  StepResult result = remote_->receive(f.id, f.plan.batch.logits_rows.size());
  for (Sequence* seq : f.plan.seqs) live_.at(seq->seq_id).in_flight = false;
  emit_all(f.slot, f.plan, result.samples);
}

void Engine::peer_lost(const std::string& why) {
  if (!live_.empty()) log_error("peer lost with ", live_.size(), " requests live: ", why);
  end_all(FinishReason::ERROR, why, false);
  pending_closes_.clear();
  blocks_.forget_cached();
  publish_gauges();
}

}  // namespace spark
