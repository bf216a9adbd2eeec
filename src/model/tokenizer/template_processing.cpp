#include "quartet/model/tokenizer/template_processing.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

// The ids of the special token `name` of the template's special_tokens map.
void append_special(const JsonFile& f, const json& specials, const std::string& name, const std::string& jp,
                    std::vector<int64_t>& dst) {
  const std::string entry_path = jp + ".special_tokens['" + name + "']";
  const json& entry = f.member(specials, name.c_str(), jp + ".special_tokens");
  const json& ids = f.member(entry, "ids", entry_path);
  if (!ids.is_array()) f.refuse_at(entry_path + ".ids", "is not a list");
  for (size_t k = 0; k < ids.size(); ++k) dst.push_back(f.id_at(ids[k], entry_path + ".ids[" + std::to_string(k) + "]"));
}

void read_template(const JsonFile& f, const json& p, const std::string& jp, PostProcessor& out, bool& seen) {
  if (seen) f.refuse_at(jp, "is a second TemplateProcessing");
  seen = true;
  const json& single = f.member(p, "single", jp);
  if (!single.is_array()) f.refuse_at(jp + ".single", "is not a list");
  const json& specials = f.member(p, "special_tokens", jp);
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string ip = jp + ".single[" + std::to_string(i) + "]";
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      const std::string id = f.string_at(f.member(item["Sequence"], "id", ip + ".Sequence"), ip + ".Sequence.id");
      if (id != "A" || seen_sequence) f.refuse_at(ip, "is not the one sequence A of a single-sequence template");
      seen_sequence = true;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name =
          f.string_at(f.member(item["SpecialToken"], "id", ip + ".SpecialToken"), ip + ".SpecialToken.id");
      append_special(f, specials, name, jp, seen_sequence ? out.after : out.before);
    } else {
      f.refuse_at(ip, "is neither a Sequence nor a SpecialToken");
    }
  }
  if (!seen_sequence) f.refuse_at(jp + ".single", "has no sequence $A");
}

void read_step(const JsonFile& f, const json& p, const std::string& jp, PostProcessor& out, bool& seen_template) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = f.member(p, "processors", jp);
    if (!list.is_array()) f.refuse_at(jp + ".processors", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_step(f, list[i], jp + ".processors[" + std::to_string(i) + "]", out, seen_template);
    return;
  }
  if (type != "TemplateProcessing")
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, TemplateProcessing or a Sequence of them)");
  read_template(f, p, jp, out, seen_template);
}

}  // namespace

PostProcessor read_post_processor(const JsonFile& f, const nlohmann::json& p, const std::string& json_path) {
  PostProcessor out;
  bool seen_template = false;
  read_step(f, p, json_path, out, seen_template);
  return out;
}

}  // namespace quartet
