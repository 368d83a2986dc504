// bench_prompts.h — the prompts a benchmark sends: random text of a controlled token
// length (optionally behind a shared prefix, to measure prefix caching), or real prompts
// from a JSONL file.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spark {

struct BenchPrompt {
  std::string text;                     // the prompt, or the user message when sent to chat
  nlohmann::json messages;              // a dataset line's "messages" (null otherwise)
  long long tokens = -1;                // prompt length as counted or estimated; -1 unknown
  std::optional<long long> max_tokens;  // a dataset line's own "max_tokens"
};

// Counts the tokens of `text` as the server would (special tokens included); nullopt
// when the server has no way to say.
using TokenCounter = std::function<std::optional<long long>(const std::string& text)>;

struct PromptSet {
  std::vector<BenchPrompt> prompts;
  bool counted = false;     // lengths come from the server's tokenizer
  std::string length_note;  // how the lengths were obtained, for the report
  long long prefix_tokens = 0;
};

// `count` prompts of `prefix_len + input_len` tokens each: the first `prefix_len` tokens
// are the same text in every prompt, the rest differs. Text is words drawn with `seed`
// from a built-in list whose every word is one token (with its leading space) in the
// Llama 3, Qwen3, gpt-oss, Gemma 3 and SmolLM2 tokenizers. With a counter the word count
// is adjusted until the server's count matches (a few calls per prompt); without one the
// length is estimated as one token per word, special tokens not included.
PromptSet random_prompts(size_t count, long long input_len, long long prefix_len, uint64_t seed,
                         const TokenCounter& counter);

// Prompts from a JSONL file: one object per line with "prompt" (a string) or "messages"
// (a chat message array), and optionally "max_tokens". Blank lines are skipped. Lines are
// used in order and reused from the top when `count` exceeds them; count 0 means every
// line once. `chat` says the prompts go to /v1/chat/completions (a "prompt" line then
// becomes one user message; "messages" lines need it). Throws InputError naming the
// file and line of the first bad line.
PromptSet dataset_prompts(const std::string& path, size_t count, bool chat, const TokenCounter& counter);

// The built-in word list (exposed for tests).
const std::vector<const char*>& bench_words();

}  // namespace spark
