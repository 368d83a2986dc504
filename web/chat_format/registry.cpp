// registry.cpp — the chat formats, one row each, in the order detection tries them. A new
// format is one file in this folder and one row here.
#include <algorithm>
#include <vector>

#include "web/chat_format/chat_format.h"

namespace spark {

const ChatFormat& gemma4_chat_format();   // gemma4.cpp
const ChatFormat& harmony_chat_format();  // harmony.cpp
const ChatFormat& hermes_chat_format();   // hermes.cpp
const ChatFormat& llama3_chat_format();   // llama3.cpp
const ChatFormat& qwen3_xml_chat_format();  // qwen3_xml.cpp

namespace {

// Harmony first: its templates may also mention the others' marks. Qwen3-Coder's XML
// before Hermes: its templates wrap the calls in Hermes' <tool_call> tags too.
constexpr const ChatFormat& (*kFormats[])() = {
    harmony_chat_format,
    gemma4_chat_format,
    qwen3_xml_chat_format,
    hermes_chat_format,
    llama3_chat_format,
};

std::vector<const ChatFormat*>& registered() {
  static std::vector<const ChatFormat*> formats;
  return formats;
}

}  // namespace

const ChatFormat& default_chat_format() { return hermes_chat_format(); }

const ChatFormat& detect_chat_format(const TemplateText& text) {
  for (const ChatFormat* f : registered())
    if (f->detect(text)) return *f;
  for (auto format : kFormats)
    if (format().detect(text)) return format();
  return default_chat_format();
}

const ChatFormat* find_chat_format(std::string_view name) {
  for (const ChatFormat* f : registered())
    if (name == f->name()) return f;
  for (auto format : kFormats)
    if (name == format().name()) return &format();
  return nullptr;
}

void register_chat_format(const ChatFormat& format) { registered().insert(registered().begin(), &format); }

void unregister_chat_format(const ChatFormat& format) {
  auto& formats = registered();
  formats.erase(std::remove(formats.begin(), formats.end(), &format), formats.end());
}

}  // namespace spark
