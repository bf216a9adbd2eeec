#include "quartet/model/generation_config.hpp"

#include "quartet/core/files.hpp"
#include "quartet/model/tokenizer/json_file.hpp"

namespace quartet {

std::vector<int64_t> generation_stop_ids(const std::string& model_dir) {
  const JsonFile file{model_dir + "/generation_config.json"};
  if (model_dir.empty() || !is_regular_file(file.path)) return {};
  const nlohmann::json j = read_json(file.path);
  if (!j.is_object()) file.refuse_at("", "is not a JSON object");
  std::vector<int64_t> ids;
  if (!j.contains("eos_token_id") || j.at("eos_token_id").is_null()) return ids;
  const nlohmann::json& eos = j.at("eos_token_id");
  if (eos.is_array()) {
    for (size_t i = 0; i < eos.size(); ++i) ids.push_back(file.id_at(eos[i], "eos_token_id[" + std::to_string(i) + "]"));
  } else {
    ids.push_back(file.id_at(eos, "eos_token_id"));
  }
  return ids;
}

}  // namespace quartet
