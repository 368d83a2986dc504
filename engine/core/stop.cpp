// stop.cpp — stop-token and stop-string rules.
#include "engine/core/stop.h"

#include <algorithm>

namespace spark {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }), stops_.end());
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

std::string StopStringMatcher::push(std::string_view delta) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(delta);
  // A new match must end inside the delta, so it starts at most longest_-1 bytes before it.
  const size_t search_from = pending_.size() >= longest_ ? pending_.size() - (longest_ - 1) : 0;
  pending_.append(delta);

  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s, search_from);
    if (at != std::string::npos && (first == std::string::npos || at < first ||
                                    (at == first && s.size() < matched_->size()))) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of the text that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

StopChecker::StopChecker(const SamplingParams& params, const std::vector<int32_t>& eos_ids, int64_t max_tokens)
    : user_stop_ids_(params.stop_token_ids),
      min_tokens_(params.min_tokens),
      max_tokens_(max_tokens),
      matcher_(params.stop) {
  if (!params.ignore_eos) stop_ids_ = eos_ids;
  stop_ids_.insert(stop_ids_.end(), user_stop_ids_.begin(), user_stop_ids_.end());
}

StopChecker::TokenVerdict StopChecker::on_token(int32_t token, int64_t num_output_tokens) const {
  TokenVerdict v;
  if (num_output_tokens >= min_tokens_ &&
      std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    v.finished = true;
    v.reason = FinishReason::STOP;
    v.hide_text = true;
    // vLLM reports the id for stop_token_ids and nothing for EOS.
    if (std::find(user_stop_ids_.begin(), user_stop_ids_.end(), token) != user_stop_ids_.end()) v.stop_token = token;
  } else if (num_output_tokens >= max_tokens_) {
    v.finished = true;
    v.reason = FinishReason::LENGTH;
  }
  return v;
}

std::string StopChecker::on_text(std::string_view delta, int64_t num_output_tokens) {
  // Before min_tokens no stop string may end the sequence; text still passes through the
  // matcher afterwards, so a stop string completed later is found from that point on.
  if (num_output_tokens < min_tokens_) {
    std::string out = matcher_.flush();
    out.append(delta);
    return out;
  }
  return matcher_.push(delta);
}

}  // namespace spark
