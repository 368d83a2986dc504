// pooling.h — what an embedder or a reranker makes of a prompt's final hidden states:
// which token's state it keeps, whether the vector is L2-normalised, and a reranker's
// score head and prompt. Read from the model's files: sentence-transformers' modules.json
// and 1_Pooling/config.json in a Hugging Face folder, llama.cpp's pooling_type,
// classifier labels, cls.output tensor and rerank template in a GGUF file.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model_loader.h"

namespace spark {

enum class Pooling : uint8_t { LAST, CLS, MEAN };
const char* pooling_name(Pooling p);

struct PoolingModel {
  Pooling pooling = Pooling::LAST;
  bool normalize = true;  // L2, as sentence-transformers' Normalize module and llama.cpp do
  int64_t hidden_size = 0;

  // A reranker's score of the pooled state h: sigmoid(w . h + b) with one row; with two
  // (a "yes" and a "no" row: Qwen3-Reranker's LM-head rows of those tokens, or llama.cpp's
  // cls.output) the softmax probability of "yes", sigmoid((w_yes - w_no) . h + b_yes - b_no).
  // Either way one row w and bias b remain: [hidden_size] f32.
  std::vector<float> score_row;
  float score_bias = 0.0f;
  // A cross-encoder's classifier first maps h to tanh(W h + b) ([hidden_size]^2 row-major and
  // [hidden_size] f32); empty when the row reads h itself.
  std::vector<float> score_dense, score_dense_bias;
  // A cross-encoder reads the query and the document as the tokenizer's pair
  // (Tokenizer::encode_pair) rather than in a prompt.
  bool pair_input = false;
  // The reranker's prompt, with {query} and {document} (and {instruction}) where the pair
  // goes: the GGUF's tokenizer.chat_template.rerank, else the Qwen3-Reranker format.
  std::string rerank_template;
  std::string default_instruction;

  float score(std::span<const float> hidden) const;
  // The rerank prompt of one pair; `instruction` empty: the default.
  std::string rerank_prompt(const std::string& query, const std::string& document, const std::string& instruction) const;
};

// The embedding of a pooled state: normalised as the model says, then (dimensions > 0)
// cut to its first `dimensions` values and normalised again (Matryoshka truncation).
std::vector<float> embedding_of(const PoolingModel& model, std::span<const float> hidden, int64_t dimensions);

// For info.role "embed" or "rerank". token_id maps a token's text to its id (the
// reranker's "yes" and "no"). Throws InputError naming the file and key for a pooling the
// engine does not run, or a reranker without a usable head.
PoolingModel read_pooling_model(const ModelInfo& info,
                                const std::function<std::optional<int32_t>(const std::string&)>& token_id);

}  // namespace spark
