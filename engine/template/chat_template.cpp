// chat_template.cpp — finds a model's chat template and special tokens, and renders
// conversations with the same inputs transformers gives the template.
#include "engine/template/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/gguf.h"
#include "engine/template/jinja/template.h"
#include "engine/template/jinja/value.h"

namespace spark {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError("cannot read " + path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ojson read_json(const fs::path& path) {
  try {
    return ojson::parse(read_text(path));
  } catch (const ojson::exception& e) {
    throw InputError(path.string() + " is not valid JSON: " + e.what());
  }
}

// A special token in tokenizer_config.json: a string, or an AddedToken object.
std::optional<std::string> token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

const char* const kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};

}  // namespace

void ChatTemplate::add(std::string name, std::string source) {
  auto compiled = std::make_shared<const jinja::Template>(source);
  templates_.push_back({std::move(name), std::move(source), std::move(compiled)});
}

ChatTemplate ChatTemplate::from_source(std::string template_text, std::string bos_token, std::string eos_token) {
  ChatTemplate t;
  t.add("default", std::move(template_text));
  if (!bos_token.empty()) t.special_tokens_["bos_token"] = std::move(bos_token);
  if (!eos_token.empty()) t.special_tokens_["eos_token"] = std::move(eos_token);
  return t;
}

ChatTemplate ChatTemplate::from_model(const std::string& model_path, const std::string& override_path) {
  ChatTemplate t;
  fs::path root(model_path);
  std::error_code ec;
  bool is_dir = fs::is_directory(root, ec);
  if (!is_dir && !fs::is_regular_file(root, ec))
    throw InputError("model path " + model_path + " is neither a folder nor a file");

  if (is_dir) {
    fs::path config_path = root / "tokenizer_config.json";
    ojson config = fs::exists(config_path) ? read_json(config_path) : ojson::object();
    if (!config.is_object()) throw InputError(config_path.string() + " must hold a JSON object");
    ojson legacy = fs::exists(root / "special_tokens_map.json") ? read_json(root / "special_tokens_map.json") : ojson::object();
    for (const char* key : kSpecialTokenKeys) {
      std::optional<std::string> text;
      if (config.contains(key)) text = token_text(config[key]);
      else if (legacy.is_object() && legacy.contains(key)) text = token_text(legacy[key]);
      if (text) t.special_tokens_[key] = *text;
    }
    if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object())
      for (const auto& [name, value] : config["extra_special_tokens"].items())
        if (auto text = token_text(value)) t.special_tokens_[name] = *text;

    if (override_path.empty()) {
      if (fs::exists(root / "chat_template.jinja")) {
        t.add("default", read_text(root / "chat_template.jinja"));
        fs::path extra_dir = root / "additional_chat_templates";
        if (fs::is_directory(extra_dir, ec)) {
          std::vector<fs::path> files;
          for (const auto& entry : fs::directory_iterator(extra_dir))
            if (entry.path().extension() == ".jinja") files.push_back(entry.path());
          std::sort(files.begin(), files.end());
          for (const auto& f : files) t.add(f.stem().string(), read_text(f));
        }
      } else if (config.contains("chat_template")) {
        const ojson& ct = config["chat_template"];
        if (ct.is_string()) {
          t.add("default", ct.get<std::string>());
        } else if (ct.is_array()) {
          for (const auto& item : ct) {
            if (!item.is_object() || !item.contains("name") || !item.contains("template") ||
                !item["name"].is_string() || !item["template"].is_string())
              throw InputError(config_path.string() + ": chat_template list entries need a name and a template");
            t.add(item["name"].get<std::string>(), item["template"].get<std::string>());
          }
        } else if (!ct.is_null()) {
          throw InputError(config_path.string() + ": chat_template must be a string or a list of {name, template}");
        }
      }
    }
  } else {
    GgufFile file = GgufFile::open(model_path);
    GgufVocab vocab = read_gguf_vocab(file);
    auto token = [&](int32_t id) -> std::optional<std::string> {
      if (id < 0 || static_cast<size_t>(id) >= vocab.tokens.size()) return std::nullopt;
      return vocab.tokens[static_cast<size_t>(id)];
    };
    if (auto s = token(vocab.bos_id)) t.special_tokens_["bos_token"] = *s;
    if (auto s = token(vocab.eos_id)) t.special_tokens_["eos_token"] = *s;
    if (auto s = token(vocab.unk_id)) t.special_tokens_["unk_token"] = *s;
    if (auto s = token(vocab.pad_id)) t.special_tokens_["pad_token"] = *s;
    if (override_path.empty()) {
      if (!vocab.chat_template.empty()) t.add("default", vocab.chat_template);
      // llama.cpp stores extra named templates as tokenizer.chat_template.<name>.
      for (const auto& [key, value] : file.metadata) {
        const std::string prefix = "tokenizer.chat_template.";
        if (key.rfind(prefix, 0) == 0 && value.type == GgufType::STRING) t.add(key.substr(prefix.size()), value.s);
      }
    }
  }

  if (!override_path.empty()) t.add("default", read_text(override_path));
  if (t.templates_.empty())
    throw InputError("no chat template found for " + model_path +
                     " (looked for chat_template.jinja, tokenizer_config.json's chat_template and the GGUF "
                     "tokenizer.chat_template); set model.chat_template to a .jinja file");
  return t;
}

const ChatTemplate::Named& ChatTemplate::select(bool with_tools) const {
  if (templates_.size() == 1) return templates_[0];
  auto find = [&](const char* name) -> const Named* {
    for (const auto& n : templates_)
      if (n.name == name) return &n;
    return nullptr;
  };
  if (with_tools)
    if (const Named* n = find("tool_use")) return *n;
  if (const Named* n = find("default")) return *n;
  std::string names;
  for (const auto& n : templates_) names += (names.empty() ? "" : ", ") + n.name;
  throw InputError("this model has several chat templates (" + names + ") and none is named 'default'");
}

const std::string& ChatTemplate::source(bool with_tools) const { return select(with_tools).source; }

std::string ChatTemplate::render(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                 const ojson& extra_kwargs) const {
  using jinja::Value;
  if (!messages.is_array()) throw InputError("messages must be a list of message objects");
  if (messages.empty()) throw InputError("cannot apply the chat template to an empty conversation");
  if (!extra_kwargs.is_object() && !extra_kwargs.is_null()) throw InputError("template arguments must be an object");

  Value vars = Value::dict();
  jinja::Dict& d = vars.as_dict();
  for (const auto& [k, v] : special_tokens_.items()) d.set(k, jinja::from_json(v));
  Value documents = Value::none();
  if (extra_kwargs.is_object()) {
    for (const auto& [k, v] : extra_kwargs.items()) {
      if (k == "messages" || k == "tools" || k == "add_generation_prompt")
        throw InputError("template argument '" + k + "' is given twice");
      if (k == "documents") documents = jinja::from_json(v);
      else d.set(k, jinja::from_json(v));
    }
  }

  // transformers drops null-valued keys and aliases reasoning fields before rendering.
  jinja::ValueList chat;
  for (const auto& m : messages) {
    if (!m.is_object()) throw InputError("each message must be a JSON object");
    ojson clean = ojson::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) clean[k] = v;
    const ojson* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning && clean.contains(key)) reasoning = &clean[key];
    if (reasoning) {
      ojson aliased = ojson::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [k, v] : clean.items()) aliased[k] = v;
      aliased["reasoning_content"] = *reasoning;
      clean = std::move(aliased);
    }
    chat.push_back(jinja::from_json(clean));
  }
  d.set("messages", Value::list(std::move(chat)));
  d.set("tools", tools.is_null() ? Value::none() : jinja::from_json(tools));
  d.set("documents", documents);
  d.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  try {
    return select(!tools.is_null()).compiled->render(vars);
  } catch (const TemplateError& e) {
    throw TemplateError(std::string("chat template error: ") + e.what(), e.kind);
  }
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra_kwargs) const {
  return render(ojson::parse(messages.dump()), ojson::parse(tools.dump()), add_generation_prompt,
                ojson::parse(extra_kwargs.dump()));
}

}  // namespace spark
