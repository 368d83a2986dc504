// stop.h — when a sequence ends: EOS ids, stop token ids, max_tokens, and stop strings
// matched across token boundaries with the text held back while it could still start one.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/step/sampling_params.h"
#include "engine/core/sequence.h"

namespace spark {

// Finds stop strings in a stream of text deltas. Text that could still be the start of a
// stop string is held back; on a match, the text before it is released and the stop
// string and everything after it are dropped.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends a delta; returns the text that is safe to emit now.
  std::string push(std::string_view delta);
  // Releases the held-back text (the sequence ended for another reason).
  std::string flush();
  bool matched() const { return matched_.has_value(); }
  const std::optional<std::string>& matched_stop() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string pending_;
  std::optional<std::string> matched_;
};

// The per-sequence stop rules. Feed each sampled token with on_token, then its text
// (unless on_token said to hide it) with on_text.
class StopChecker {
 public:
  StopChecker(const SamplingParams& params, const std::vector<int32_t>& eos_ids, int64_t max_tokens);

  struct TokenVerdict {
    bool finished = false;
    FinishReason reason = FinishReason::STOP;
    // An EOS or stop token ends the sequence and its text is not part of the output.
    bool hide_text = false;
    std::optional<int32_t> stop_token;
  };
  // `num_output_tokens` counts the token just sampled.
  TokenVerdict on_token(int32_t token, int64_t num_output_tokens) const;

  // Returns the text safe to emit; stopped_by_string() tells whether a stop string ended it.
  std::string on_text(std::string_view delta, int64_t num_output_tokens);
  std::string flush() { return matcher_.flush(); }
  bool stopped_by_string() const { return matcher_.matched(); }
  const std::optional<std::string>& matched_stop() const { return matcher_.matched_stop(); }

 private:
  std::vector<int32_t> stop_ids_;  // EOS (unless ignore_eos) and stop_token_ids
  std::vector<int32_t> user_stop_ids_;
  int64_t min_tokens_;
  int64_t max_tokens_;
  StopStringMatcher matcher_;
};

}  // namespace spark
