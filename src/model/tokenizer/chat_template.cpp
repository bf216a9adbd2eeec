#include "quartet/model/tokenizer/chat_template.hpp"

#include "quartet/core/files.hpp"
#include "quartet/model/tokenizer/json_file.hpp"

namespace quartet {

namespace {

// Python's universal newlines (open(..., encoding="utf-8").read()): "\r\n" and "\r" are "\n".
std::string python_text(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\r') {
      out += bytes[i];
    } else {
      out += '\n';
      if (i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
    }
  }
  return out;
}

bool has_jinja_files(const std::string& dir) {
  if (!is_directory(dir)) return false;
  for (const std::string& name : list_directory(dir))
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".jinja") == 0) return true;
  return false;
}

std::optional<ChatTemplate> from_tokenizer_config(const std::string& path) {
  if (!is_regular_file(path)) return std::nullopt;
  const JsonFile file{path};
  const nlohmann::json config = read_json(path);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return std::nullopt;
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return ChatTemplate{t.get<std::string>(), path};
  if (!t.is_array()) file.refuse_at("chat_template", "is neither a string nor a list of {name, template}");
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string at = "chat_template[" + std::to_string(i) + "]";
    if (file.string_at(file.member(t[i], "name", at), at + ".name") == "default")
      return ChatTemplate{file.string_at(file.member(t[i], "template", at), at + ".template"), path};
  }
  return std::nullopt;  // named templates only: none is used without a name
}

}  // namespace

std::optional<ChatTemplate> find_chat_template(const std::string& model_dir) {
  const std::string dir = strip_trailing_slashes(model_dir);
  for (const std::string name : {"chat_templates/default.jinja", "chat_template.jinja"}) {
    const std::string path = dir + "/" + name;
    if (is_regular_file(path)) return ChatTemplate{python_text(read_file(path)), path};
  }
  if (has_jinja_files(dir + "/chat_templates")) return std::nullopt;
  return from_tokenizer_config(dir + "/tokenizer_config.json");
}

}  // namespace quartet
