#pragma once
// The chat template of a Hugging Face model directory: the one transformers'
// apply_chat_template uses when no template and no tools are given, found by transformers'
// rules (tokenization_utils_base.py, from_pretrained):
//   1. chat_templates/default.jinja, else chat_template.jinja (read as Python's text mode reads
//      it: "\r\n" and a lone "\r" become "\n");
//   2. when neither exists and no chat_templates/*.jinja does either: tokenizer_config.json's
//      "chat_template", a string, or a list of {"name", "template"} whose "default" entry it is.
// Quartet never renders a template (the data preparation does, with transformers itself): it
// only tells a prepared prompts file's template from the actor's.
#include <optional>
#include <string>

namespace quartet {

struct ChatTemplate {
  std::string text;    // the template's source, as transformers holds it
  std::string source;  // where it was found: "DIR/chat_template.jinja" or "DIR/tokenizer_config.json"
};

// nullopt when the directory has none (a base model). A tokenizer_config.json that cannot be
// parsed, or a "chat_template" of another type, is a quartet::Error naming the file and key.
std::optional<ChatTemplate> find_chat_template(const std::string& model_dir);

}  // namespace quartet
