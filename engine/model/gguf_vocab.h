// gguf_vocab.h — the tokenizer found in a GGUF file's metadata (tokenizer.ggml.*),
// handed from the GGUF loader to the tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

struct GgufVocab {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece BPE) or
                      // "t5" (SentencePiece Unigram: T5, XLM-RoBERTa and its embedding models)
  std::string pre;    // tokenizer.ggml.pre: names the pre-tokenizer regex ("smollm", "llama-bpe", ...)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty when absent
  std::vector<int32_t> token_types; // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;  // "a b" pairs, highest priority first
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  int32_t sep_id = -1;  // tokenizer.ggml.seperator_token_id (llama.cpp's spelling)
  bool add_bos = false, add_eos = false;
  bool add_sep = false;  // a pair puts SEP before its second text (XLM-R: <s> a </s></s> b </s>)
  bool add_space_prefix = false;
  bool remove_extra_whitespaces = false;  // "t5": runs of spaces become one
  std::string precompiled_charsmap;       // "t5": SentencePiece's normalization rules, raw bytes
  std::string chat_template;  // tokenizer.chat_template, empty when absent
};

}  // namespace spark
