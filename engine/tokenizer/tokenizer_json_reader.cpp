// tokenizer_json_reader.cpp — a SAX pass over tokenizer.json. Building a DOM for a vocabulary
// of 262k entries and 500k merges costs seconds; streaming them into arenas costs a fraction.
#include "engine/tokenizer/tokenizer_json_reader.h"

#include "engine/util/check.h"

namespace spark {

namespace {

using json = nlohmann::json;

class Reader {
 public:
  explicit Reader(TokenizerJsonParts& out) : out_(out), dom_(out.rest, true) {}

  bool null() { return value([&] { return dom_.null(); }); }
  bool boolean(bool v) { return value([&] { return dom_.boolean(v); }); }
  bool number_integer(json::number_integer_t v) {
    if (mode_ == VOCAB) return vocab_entry(v);
    return value([&] { return dom_.number_integer(v); });
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == VOCAB) return vocab_entry(v > json::number_unsigned_t(INT32_MAX) ? -1 : int64_t(v));
    return value([&] { return dom_.number_unsigned(v); });
  }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return value([&] { return dom_.number_float(v, s); });
  }
  bool string(json::string_t& s) {
    if (mode_ == MERGES) {
      if (depth_ == mode_depth_) {
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw InputError("tokenizer.json: merge '" + s + "' is not two tokens separated by one space");
        out_.vocab.add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1));
      } else {
        pair_[pair_size_ < 2 ? pair_size_ : 1] = s;
        ++pair_size_;
      }
      return true;
    }
    return value([&] { return dom_.string(s); });
  }
  bool binary(json::binary_t& b) { return value([&] { return dom_.binary(b); }); }

  bool start_object(std::size_t n) {
    ++depth_;
    if (mode_ != NORMAL) throw InputError("tokenizer.json: unexpected object inside model vocab or merges");
    if (pending_ == VOCAB) {
      pending_ = NORMAL;
      mode_ = VOCAB;
      mode_depth_ = depth_;
      out_.has_vocab = true;
      out_.vocab.tokens.reserve(n == std::size_t(-1) ? 1024 : n);
      return true;
    }
    flush_pending_key();
    if (depth_ == 2 && last_root_key_ == "model") in_model_ = true;
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (mode_ == VOCAB) {
      vocab_key_ = k;
      return true;
    }
    if (depth_ == 1) last_root_key_ = k;
    if (in_model_ && depth_ == 2 && (k == "vocab" || k == "merges")) {
      pending_ = k == "vocab" ? VOCAB : MERGES;
      pending_key_ = k;
      return true;
    }
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    if (mode_ == VOCAB && depth_ == mode_depth_ - 1) {
      mode_ = NORMAL;
      return true;
    }
    if (depth_ == 1) in_model_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    if (mode_ == VOCAB) throw InputError("tokenizer.json: vocabulary entry '" + vocab_key_ + "' must be an integer id");
    if (mode_ == MERGES) {
      if (depth_ != mode_depth_ + 1) throw InputError("tokenizer.json: merges nest too deeply");
      pair_size_ = 0;
      return true;
    }
    if (pending_ == MERGES) {
      pending_ = NORMAL;
      mode_ = MERGES;
      mode_depth_ = depth_;
      return true;
    }
    flush_pending_key();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    if (mode_ == MERGES) {
      if (depth_ == mode_depth_) {
        if (pair_size_ != 2) throw InputError("tokenizer.json: each merge pair must hold exactly two strings");
        out_.vocab.add_merge(pair_[0], pair_[1]);
        return true;
      }
      mode_ = NORMAL;
      return true;
    }
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    throw InputError("tokenizer.json is not valid JSON (byte " + std::to_string(pos) + "): " + e.what());
  }

 private:
  enum Mode { NORMAL, VOCAB, MERGES };

  template <typename F>
  bool value(F&& forward) {
    if (mode_ == VOCAB) throw InputError("tokenizer.json: vocabulary entry '" + vocab_key_ + "' must be an integer id");
    if (mode_ == MERGES) throw InputError("tokenizer.json: merges must be strings or pairs of strings");
    flush_pending_key();
    return forward();
  }
  // vocab / merges that are not of the expected shape stay in the document, where the model
  // builder reports them.
  void flush_pending_key() {
    if (pending_ == NORMAL) return;
    pending_ = NORMAL;
    dom_.key(pending_key_);
  }
  bool vocab_entry(int64_t id) {
    if (id < 0 || id >= (int64_t(1) << 28))
      throw InputError("tokenizer.json: vocabulary entry '" + vocab_key_ + "' has an invalid id");
    out_.vocab.tokens.insert(vocab_key_, int32_t(id));
    return true;
  }

  TokenizerJsonParts& out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  Mode mode_ = NORMAL, pending_ = NORMAL;
  int mode_depth_ = 0;
  bool in_model_ = false;
  std::string last_root_key_, pending_key_, vocab_key_;
  std::string pair_[2];
  int pair_size_ = 0;
};

}  // namespace

TokenizerJsonParts read_tokenizer_json(const std::string& text) {
  TokenizerJsonParts parts;
  Reader reader(parts);
  json::sax_parse(text, &reader);
  return parts;
}

}  // namespace spark
