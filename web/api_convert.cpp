// api_convert.cpp — flat tools and sampling extensions into a chat completions body.
#include "web/api_convert.h"

#include "web/openai_request.h"

namespace spark {

using J = nlohmann::ordered_json;

J flat_tools_as_chat(const J& tools, const char* schema_key, bool schema_required,
                     std::initializer_list<const char*> function_types, const std::string& what_is_served) {
  if (!tools.is_array()) bad_request("tools", "'tools' must be an array");
  J out = J::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const J& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad_request("tools", "'" + where + "' must be an object");
    const J* type_field = json_field(t, "type");
    const std::string type = type_field && type_field->is_string() ? type_field->get<std::string>() : "";
    bool known = false;
    for (const char* accepted : function_types) known = known || type == accepted;
    if (!known) bad_request("tools", "'" + where + ".type' is '" + type + "': " + what_is_served);
    J fn = J::object();
    fn["name"] = t.contains("name") ? t["name"] : J();
    if (const J* d = json_field(t, "description")) fn["description"] = *d;
    const J* schema = json_field(t, schema_key);
    if ((schema_required && !schema) || (schema && !schema->is_object()))
      bad_request("tools", "'" + where + "." + schema_key + "' must be a JSON Schema object");
    if (schema) fn["parameters"] = *schema;
    out.push_back(J{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

void copy_sampling_extensions(const J& from, J& to) {
  for (const char* key : {"seed", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
                          "logit_bias", "ignore_eos", "speculative"})
    if (auto it = from.find(key); it != from.end()) to[key] = *it;
}

}  // namespace spark
