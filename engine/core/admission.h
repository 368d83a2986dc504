// admission.h — the one check of a request against the model: prompt ids inside the
// vocabulary, sampling parameters in range, prompt + max_tokens inside the context.
// Engine::submit runs it for every entry (HTTP, CLI, peer head); the HTTP layer may run
// it earlier to word its own error, but never restates the rule.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "engine/step/sampling_params.h"
#include "engine/util/check.h"

namespace spark {

// A prompt that, with the output asked for, does not fit the context; the numbers let
// each API word the refusal its own way.
struct ContextLengthError : InputError {
  ContextLengthError(const std::string& message, int64_t prompt, std::optional<int64_t> asked, int64_t context)
      : InputError(message), prompt_tokens(prompt), max_tokens(asked), max_model_len(context) {}
  int64_t prompt_tokens;
  std::optional<int64_t> max_tokens;  // as requested; absent when the request left it open
  int64_t max_model_len;
};

class Admission {
 public:
  Admission(int64_t vocab_size, int64_t max_model_len);

  // Throws InputError naming the problem (ContextLengthError for the context); returns
  // max_tokens resolved (absent: the room left in the context). A prompt-only request
  // (Request::last_hidden_state) needs no room for output: it may fill the context.
  int64_t check(std::span<const int32_t> prompt_ids, const SamplingParams& params, bool prompt_only = false) const;

  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_model_len() const { return max_model_len_; }

 private:
  int64_t vocab_size_;
  int64_t max_model_len_;
};

}  // namespace spark
