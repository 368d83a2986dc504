// request_stream.cpp — merging outputs and the blocking pop of the output channel.
#include "engine/core/request_stream.h"

#include "engine/util/check.h"

namespace spark {

void RequestOutput::merge(RequestOutput&& later) {
  token_ids.insert(token_ids.end(), later.token_ids.begin(), later.token_ids.end());
  token_times.insert(token_times.end(), later.token_times.begin(), later.token_times.end());
  text += later.text;
  for (auto& lp : later.logprobs) logprobs.push_back(std::move(lp));
  num_prompt_tokens = later.num_prompt_tokens;
  num_cached_tokens = later.num_cached_tokens;
  num_output_tokens = later.num_output_tokens;
  finished = later.finished;
  finish_reason = later.finish_reason;
  stop_string = std::move(later.stop_string);
  stop_token = later.stop_token;
  error = std::move(later.error);
  if (!later.hidden.empty()) hidden = std::move(later.hidden);
  timings = later.timings;
}

void RequestStream::push(RequestOutput out) {
  {
    std::lock_guard lock(mu_);
    SPARK_CHECK(!closed_, "output pushed after the final one");
    closed_ = out.finished;
    if (pending_) pending_->merge(std::move(out)); else pending_ = std::move(out);
  }
  cv_.notify_all();
}

std::optional<RequestOutput> RequestStream::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return pending_.has_value() || closed_; });
  std::optional<RequestOutput> out;
  out.swap(pending_);
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace spark
