// tokenizer_json_reader.h — streams tokenizer.json: the model's vocabulary and merges go
// straight into compact tables, everything else becomes an ordinary JSON document.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/bpe.h"

namespace spark {

struct TokenizerJsonParts {
  nlohmann::json rest;  // the document without model.vocab and model.merges
  BpeVocab vocab;
  bool has_vocab = false;  // model.vocab was an object
};

// Throws InputError when the text is not valid JSON or a vocab / merge entry is malformed.
TokenizerJsonParts read_tokenizer_json(const std::string& text);

}  // namespace spark
