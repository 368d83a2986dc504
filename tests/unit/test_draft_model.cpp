// test_draft_model.cpp — the draft model's bookkeeping against a recomputation: at every
// step, whatever the verification accepted before, preemptions included, its drafts equal
// those of a draft model that runs every sequence from its first token.
#include <doctest/doctest.h>

#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/admission.h"
#include "engine/core/draft_model.h"
#include "engine/core/scheduler.h"
#include "engine/model/model_loader.h"

using namespace spark;

namespace {

constexpr int64_t kBlockSize = 4;
constexpr int64_t kMaxSeqs = 6;

struct Drafters {
  LoadedModel model;
  std::unique_ptr<DraftModel> live, scratch;
};

// Two draft models over the same weights, each with its own KV cache and states.
Drafters drafters(const std::string& path, int64_t num_blocks, int64_t budget) {
  Drafters d{load_model(config_for_model(path)), nullptr, nullptr};
  const ModelSpec& spec = d.model.info.spec;
  for (auto* m : {&d.live, &d.scratch}) {
    *m = std::make_unique<DraftModel>(std::make_unique<CpuBackend>(spec, bind_stage(spec, d.model.weights), 1), spec,
                                      budget);
    (*m)->prepare(num_blocks, kBlockSize, kMaxSeqs, {});
  }
  return d;
}

}  // namespace

TEST_CASE("draft model: drafts equal a recomputation from the first token after any acceptance and preemption") {
  // The tiny Llama (KV only) and the tiny Qwen3.5 (recurrent state: snapshots restored).
  for (const char* path : {"tests/golden/models/llama", "tests/golden/models/qwen3_5"}) {
    CAPTURE(path);
    // Few blocks, so that sequences get preempted and start over; a small step budget, so
    // that catch-ups are split over forwards.
    const int64_t num_blocks = 72, budget = 24;
    Drafters d = drafters(path, num_blocks, budget);
    BlockManager blocks(num_blocks, kBlockSize, false);
    SchedulerConfig sc;
    sc.max_num_seqs = kMaxSeqs;
    sc.max_num_batched_tokens = budget;
    sc.max_model_len = 256;
    Scheduler sched(sc, blocks);
    std::mt19937 rng(3);
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < int(kMaxSeqs); ++i) {
      std::vector<int32_t> prompt(1 + rng() % 30);
      for (auto& t : prompt) t = int32_t(rng() % 256);
      SamplingParams p;
      p.max_tokens = 60;
      seqs.push_back(std::make_unique<Sequence>(i + 1, prompt, p));
      seqs.back()->max_tokens = 60;
      sched.add(seqs.back().get());
    }
    int64_t compared = 0, restarts = 0;
    while (sched.has_work()) {
      for (Sequence* s : sched.running())
        if (s->num_uncomputed_tokens() == 1 && s->num_output_tokens() + 5 < s->max_tokens)
          s->draft_tokens.assign(1 + rng() % 4, s->last_token());
      ScheduledStep step = sched.schedule();
      restarts += int64_t(step.preempted.size());
      ScheduledStep copy = step;
      d.scratch->forget_all();
      d.scratch->draft(copy);
      std::vector<std::vector<int32_t>> want;
      for (const StepEntry& e : step.entries) want.push_back(e.seq->draft_tokens);
      d.live->draft(step);
      for (size_t i = 0; i < step.entries.size(); ++i) {
        CAPTURE(i);
        CHECK(step.entries[i].seq->draft_tokens == want[i]);
        compared += int64_t(want[i].size());
      }
      CHECK(step.batch.token_ids == copy.batch.token_ids);
      // Verification: each sequence keeps a random number of its drafts and a token that
      // differs from the next one.
      std::vector<int32_t> sampled(step.batch.logits_rows.size());
      for (const StepEntry& e : step.entries) {
        if (e.logits_row < 0) continue;
        const auto keep = int64_t(rng() % uint32_t(e.num_draft_tokens + 1));
        for (int64_t j = 0; j <= e.num_draft_tokens; ++j) {
          int32_t t = j < keep ? e.seq->draft_tokens[size_t(j)] : int32_t(rng() % 256);
          if (j < e.num_draft_tokens && j >= keep && t == e.seq->draft_tokens[size_t(j)]) t = (t + 1) % 256;
          sampled[size_t(e.logits_row + j)] = t;
        }
      }
      sched.update(step, sampled);
      for (const StepEntry& e : step.entries)
        if (e.logits_row >= 0 && e.seq->num_output_tokens() >= e.seq->max_tokens) {
          d.live->retire(e.seq->seq_id);
          sched.finish(e.seq, FinishReason::LENGTH);
        }
    }
    MESSAGE(std::string(path), ": ", compared, " drafts compared, ", restarts, " preemptions");
    CHECK(compared > 200);
    CHECK(restarts > 0);
    CHECK(blocks.num_free_blocks() == num_blocks);
  }
}
