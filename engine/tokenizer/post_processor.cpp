// post_processor.cpp — special-token templates for single sequences and pairs.
#include "engine/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

void PostProcessor::process(Ids& ids, bool add) const {
  std::vector<Ids> seqs;
  seqs.push_back(std::move(ids));
  process_list(seqs, add);
  if (seqs.size() == 1) {
    ids = std::move(seqs[0]);
    return;
  }
  ids.clear();
  for (const Ids& s : seqs) ids.insert(ids.end(), s.begin(), s.end());
}

void PostProcessor::process_pair(Ids& first, const Ids& second, bool add) const {
  std::vector<Ids> seqs;
  seqs.push_back(std::move(first));
  seqs.push_back(second);
  process_list(seqs, add);
  first.clear();
  for (const Ids& s : seqs) first.insert(first.end(), s.begin(), s.end());
}

namespace {

// llama.cpp's layout: prefix, the first sequence, suffix; every later one after the separator
// and before the suffix. Without special tokens a pair is the two sequences as they are.
class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(Ids pre, Ids post, Ids sep) : pre_(std::move(pre)), post_(std::move(post)), sep_(std::move(sep)) {}
  void process_list(std::vector<Ids>& seqs, bool add) const override {
    if (!add) return;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Ids& before = i == 0 ? pre_ : sep_;
      seqs[i].insert(seqs[i].begin(), before.begin(), before.end());
      seqs[i].insert(seqs[i].end(), post_.begin(), post_.end());
    }
  }

 private:
  Ids pre_, post_, sep_;
};

// Bert: [CLS] A [SEP] B [SEP]; Roberta: <s> A </s> </s> B </s>. Each sequence keeps its own
// list entry, as in the reference, so a later stage of a Sequence sees them apart.
class ClsSepProcessor : public PostProcessor {
 public:
  ClsSepProcessor(int32_t cls, int32_t sep, bool roberta) : cls_(cls), sep_(sep), roberta_(roberta) {}
  void process_list(std::vector<Ids>& seqs, bool add) const override {
    if (!add) return;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (i == 0 || roberta_) seqs[i].insert(seqs[i].begin(), i == 0 ? cls_ : sep_);
      seqs[i].push_back(sep_);
    }
  }

 private:
  int32_t cls_, sep_;
  bool roberta_;
};

// ByteLevel only trims offsets, which ids do not carry.
class PassThroughProcessor : public PostProcessor {
 public:
  void process_list(std::vector<Ids>&, bool) const override {}
};

// One piece of a TemplateProcessing template: a sequence (0 = $A, 1 = $B) or special-token ids.
struct TemplatePiece {
  int sequence = -1;
  Ids ids;
};

// The template's pieces become separate list entries, as the reference leaves them. Without
// special tokens the template still orders the sequences (a pair template may put $B first).
class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(std::vector<TemplatePiece> single, std::vector<TemplatePiece> pair)
      : single_(std::move(single)), pair_(std::move(pair)) {}
  void process_list(std::vector<Ids>& seqs, bool add) const override {
    if (seqs.size() > 2)
      throw InputError("tokenizer.json TemplateProcessing: cannot apply a template to " + std::to_string(seqs.size()) +
                       " sequences (a Sequence post-processor stage before it split them)");
    const std::vector<TemplatePiece>& pieces = seqs.size() == 1 ? single_ : pair_;
    std::vector<Ids> out;
    out.reserve(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      const TemplatePiece& p = pieces[i];
      if (p.sequence < 0) {
        if (add) out.push_back(p.ids);
        continue;
      }
      // A sequence's last use takes it (templates name each once), earlier ones copy it.
      bool used_later = false;
      for (size_t j = i + 1; j < pieces.size(); ++j) used_later = used_later || pieces[j].sequence == p.sequence;
      Ids& seq = seqs[size_t(p.sequence)];
      out.push_back(used_later ? seq : std::move(seq));
    }
    seqs = std::move(out);
  }

 private:
  std::vector<TemplatePiece> single_, pair_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> p) : items_(std::move(p)) {}
  void process_list(std::vector<Ids>& seqs, bool add) const override {
    for (const auto& p : items_) p->process_list(seqs, add);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

void check_id(int64_t id, int32_t vocab_size, const std::string& what) {
  if (id < 0 || id >= vocab_size)
    throw InputError("tokenizer.json post_processor: " + what + " has id " + std::to_string(id) +
                     ", outside the vocabulary (size " + std::to_string(vocab_size) + ")");
}

// `which` names the template ("single" or "pair"); a single template's sequences are all $A,
// a pair's name $A or $B.
std::vector<TemplatePiece> template_pieces(const json& pieces, const json& specials, const char* which,
                                           int32_t vocab_size) {
  std::vector<TemplatePiece> out;
  for (const auto& piece : pieces) {
    TemplatePiece p;
    if (piece.is_object() && piece.contains("Sequence")) {
      p.sequence = 0;
      if (std::string(which) == "pair") {
        const json& seq = piece["Sequence"];
        std::string id;
        if (seq.is_object() && seq.contains("id") && seq["id"].is_string()) id = seq["id"].get<std::string>();
        if (id != "A" && id != "B")
          throw InputError("tokenizer.json TemplateProcessing: a pair template's sequences must be A or B");
        p.sequence = id == "A" ? 0 : 1;
      }
      out.push_back(std::move(p));
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
        !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
      throw InputError("tokenizer.json TemplateProcessing: template piece must be Sequence or SpecialToken");
    std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials[name].is_object() ||
        !specials[name].contains("ids") || !specials[name]["ids"].is_array())
      throw InputError("tokenizer.json TemplateProcessing: special token '" + name + "' is not defined");
    for (const auto& id : specials[name]["ids"]) {
      if (!id.is_number_integer()) throw InputError("tokenizer.json TemplateProcessing: ids of '" + name + "' must be integers");
      check_id(id.get<int64_t>(), vocab_size, "special token '" + name + "'");
      p.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::unique_ptr<PostProcessor> template_processing(const json& j, int32_t vocab_size) {
  if (!j.contains("single") || !j["single"].is_array())
    throw InputError("tokenizer.json TemplateProcessing needs a 'single' array");
  const json specials = j.value("special_tokens", json::object());
  std::vector<TemplatePiece> single = template_pieces(j["single"], specials, "single", vocab_size);
  std::vector<TemplatePiece> pair;
  if (j.contains("pair") && !j["pair"].is_null()) {
    if (!j["pair"].is_array()) throw InputError("tokenizer.json TemplateProcessing: 'pair' must be an array");
    pair = template_pieces(j["pair"], specials, "pair", vocab_size);
  } else {
    // The reference's default pair template: $A $B, no special tokens.
    pair.push_back({0, {}});
    pair.push_back({1, {}});
  }
  return std::make_unique<TemplateProcessor>(std::move(single), std::move(pair));
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

std::unique_ptr<PostProcessor> make_affix_processor(Ids prefix, Ids suffix, Ids separator) {
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix), std::move(separator));
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j,
                                                   const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                                   int32_t vocab_size) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw InputError("tokenizer.json: post_processor must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return template_processing(j, vocab_size);
  if (type == "ByteLevel") return std::make_unique<PassThroughProcessor>();
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    (void)token_id;
    return std::make_unique<ClsSepProcessor>(pair_id(j, "cls", vocab_size), pair_id(j, "sep", vocab_size),
                                             type == "RobertaProcessing");
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
