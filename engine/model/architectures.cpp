// architectures.cpp — the registry: one row per file under engine/model/arch/.
#include "engine/model/architecture.h"

#include <algorithm>

namespace spark {

extern const Architecture kLlama, kMistral, kQwen2, kQwen3, kQwen3Moe, kGptOss, kQwen3_5, kQwen3_5Moe, kQwen3Next,
    kNemotronH, kNemotronHMoe, kXlmRoberta, kXlmRobertaClassifier, kGemma3, kGemma3Multimodal,
    kGemma4, kGemma4Multimodal, kGemma4Assistant;

namespace {
std::vector<const Architecture*>& registry() {
  static std::vector<const Architecture*> all = {&kLlama, &kMistral, &kQwen2, &kQwen3, &kQwen3Moe, &kGptOss,
                                                 &kQwen3_5, &kQwen3_5Moe, &kQwen3Next, &kNemotronH,
                                                 &kNemotronHMoe, &kXlmRoberta, &kXlmRobertaClassifier, &kGemma3,
                                                 &kGemma3Multimodal, &kGemma4, &kGemma4Multimodal, &kGemma4Assistant};
  return all;
}
}  // namespace

const std::vector<const Architecture*>& architectures() { return registry(); }

const Architecture* find_hf_architecture(const std::string& hf_class) {
  for (const Architecture* a : architectures())
    if (hf_class == a->hf_class) return a;
  return nullptr;
}

const Architecture* find_gguf_architecture(const std::string& gguf_name) {
  for (const Architecture* a : architectures())
    if (a->gguf_name && gguf_name == a->gguf_name) return a;
  return nullptr;
}

std::string hf_architecture_list() {
  std::string list;
  for (const Architecture* a : architectures())  // once each: two rows may share a class (llama.cpp's two names of it)
    if (find_hf_architecture(a->hf_class) == a) list += (list.empty() ? "" : ", ") + std::string(a->hf_class);
  return list;
}

std::string gguf_architecture_list() {
  std::string list;
  for (const Architecture* a : architectures())
    if (a->gguf_name) list += (list.empty() ? "" : ", ") + std::string(a->gguf_name);
  return list;
}

ScopedArchitecture::ScopedArchitecture(const Architecture& arch) : arch_(&arch) { registry().push_back(arch_); }
ScopedArchitecture::~ScopedArchitecture() { std::erase(registry(), arch_); }

}  // namespace spark
