// post_processor.cpp — special-token templates for single sequences.
#include "engine/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;

namespace {

// Every supported processor reduces, for one sequence, to ids before and after it.
class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> pre, std::vector<int32_t> post) : pre_(std::move(pre)), post_(std::move(post)) {}
  void process(std::vector<int32_t>& ids, bool add) const override {
    if (!add || (pre_.empty() && post_.empty())) return;
    ids.insert(ids.begin(), pre_.begin(), pre_.end());
    ids.insert(ids.end(), post_.begin(), post_.end());
  }
  std::vector<int32_t> pre_, post_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> p) : items_(std::move(p)) {}
  void process(std::vector<int32_t>& ids, bool add) const override {
    for (const auto& p : items_) p->process(ids, add);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

void check_id(int64_t id, int32_t vocab_size, const std::string& what) {
  if (id < 0 || id >= vocab_size)
    throw InputError("tokenizer.json post_processor: " + what + " has id " + std::to_string(id) +
                     ", outside the vocabulary (size " + std::to_string(vocab_size) + ")");
}

std::unique_ptr<PostProcessor> template_processing(const json& j, int32_t vocab_size) {
  if (!j.contains("single") || !j["single"].is_array())
    throw InputError("tokenizer.json TemplateProcessing needs a 'single' array");
  const json specials = j.value("special_tokens", json::object());
  std::vector<int32_t> pre, post;
  bool seen_sequence = false;
  for (const auto& piece : j["single"]) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id"))
      throw InputError("tokenizer.json TemplateProcessing: template piece must be Sequence or SpecialToken");
    std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      throw InputError("tokenizer.json TemplateProcessing: special token '" + name + "' is not defined");
    for (const auto& id : specials[name]["ids"]) {
      if (!id.is_number_integer()) throw InputError("tokenizer.json TemplateProcessing: ids of '" + name + "' must be integers");
      check_id(id.get<int64_t>(), vocab_size, "special token '" + name + "'");
      (seen_sequence ? post : pre).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return std::make_unique<AffixProcessor>(std::move(pre), std::move(post));
}

// Bert and Roberta name their tokens as [token, id] pairs.
int32_t pair_id(const json& j, const char* key, int32_t vocab_size) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 || !j[key][1].is_number_integer())
    throw InputError(std::string("tokenizer.json post_processor needs '") + key + "' as [token, id]");
  int64_t id = j[key][1].get<int64_t>();
  check_id(id, vocab_size, key);
  return static_cast<int32_t>(id);
}

}  // namespace

std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j,
                                                   const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                                   int32_t vocab_size) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw InputError("tokenizer.json: post_processor must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return template_processing(j, vocab_size);
  if (type == "ByteLevel") return std::make_unique<AffixProcessor>(std::vector<int32_t>{}, std::vector<int32_t>{});
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    (void)token_id;
    return make_affix_processor({pair_id(j, "cls", vocab_size)}, {pair_id(j, "sep", vocab_size)});
  }
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      throw InputError("tokenizer.json post_processor Sequence needs a 'processors' array");
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (const auto& p : j["processors"])
      if (auto made = make_post_processor(p, token_id, vocab_size)) items.push_back(std::move(made));
    return std::make_unique<SequenceProcessor>(std::move(items));
  }
  throw InputError("tokenizer.json: unsupported post_processor type '" + type + "'");
}

}  // namespace spark
