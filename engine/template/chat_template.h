// chat_template.h — a model's chat template, found where transformers finds it and rendered
// as transformers' apply_chat_template(..., tokenize=False) does.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/template/jinja/error.h"

namespace spark {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // `model_path` is a Hugging Face model folder or a .gguf file. The template comes from
  // `override_path` (a .jinja file) when given; else, in a folder, chat_template.jinja (plus
  // additional_chat_templates/*.jinja) or tokenizer_config.json's chat_template (a string or
  // a list of {name, template}); in a GGUF, tokenizer.chat_template. Special tokens
  // (bos_token, eos_token, ...) come from tokenizer_config.json or the GGUF vocabulary.
  // Throws InputError when there is no template, TemplateError when it does not parse.
  static ChatTemplate from_model(const std::string& model_path, const std::string& override_path = "");
  static ChatTemplate from_source(std::string template_text, std::string bos_token, std::string eos_token);

  // Renders a conversation. `tools` is null when the request has none (the template then
  // sees None; an empty list is passed as an empty list). `extra_kwargs` become template
  // variables (enable_thinking, date_string, ...) and override the special tokens.
  // Messages are normalized as transformers does: keys whose value is null are dropped and
  // reasoning is offered as both `reasoning_content` and `thinking`.
  // Throws TemplateError (an InputError) for template errors, including the text given to
  // raise_exception(), and when a hostile template exhausts the render budgets.
  // Use the ordered_json overload where key order matters: Python keeps insertion order,
  // so tool schemas printed with tojson keep it only when the caller kept it.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object()) const;
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& extra_kwargs = nlohmann::json::object()) const;

  // The template text that render() uses for these tools (the "tool_use" one when a model
  // has named templates and tools are given).
  const std::string& source(bool with_tools = false) const;
  // Special token strings handed to the template, e.g. {"bos_token": "<s>", ...}.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  struct Named {
    std::string name;
    std::string source;
    std::shared_ptr<const jinja::Template> compiled;
  };
  const Named& select(bool with_tools) const;
  void add(std::string name, std::string source);

  std::vector<Named> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace spark
