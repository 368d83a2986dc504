// sequence.cpp — construction and small views of a Sequence.
#include "engine/core/sequence.h"

#include "engine/constrain/constraint.h"
#include "engine/constrain/tool_trigger.h"

#include "engine/util/check.h"

namespace spark {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::ABORT: return "abort";
    case FinishReason::ERROR: return "error";
  }
  return "error";
}

std::string_view seq_status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::WAITING: return "waiting";
    case SeqStatus::RUNNING: return "running";
    case SeqStatus::PREEMPTED: return "preempted";
    case SeqStatus::FINISHED: return "finished";
  }
  return "finished";
}

Sequence::Sequence(int64_t id, std::vector<int32_t> prompt, SamplingParams p)
    : seq_id(id),
      token_ids(std::move(prompt)),
      num_prompt_tokens(static_cast<int64_t>(token_ids.size())),
      params(std::move(p)) {
  SPARK_CHECK(num_prompt_tokens > 0, "a sequence needs at least one prompt token");
  seed = params.seed.value_or(0);
  max_tokens = params.max_tokens.value_or(0);
  if (params.constraint && params.constraint->trigger)
    tool_watch = std::make_shared<constrain::ToolCallWatch>(params.constraint->trigger);
  else if (params.constraint)
    matcher = params.constraint->new_matcher();
}

void Sequence::append_token(int32_t id) {
  token_ids.push_back(id);
  if (tool_watch) tool_watch->observe(id, matcher);
}

std::vector<int32_t> Sequence::prompt_ids() const {
  return {token_ids.begin(), token_ids.begin() + num_prompt_tokens};
}

std::vector<int32_t> Sequence::output_ids() const {
  return {token_ids.begin() + num_prompt_tokens, token_ids.end()};
}

}  // namespace spark
