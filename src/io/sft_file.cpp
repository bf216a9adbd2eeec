#include "quartet/io/sft_file.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

constexpr const char* kHeaderKey = "quartet_sft";

bool is_header(const nlohmann::json& j) { return j.is_object() && j.contains(kHeaderKey); }

std::string string_field(const nlohmann::json& j, const std::string& field, const std::string& where) {
  QUARTET_CHECK(j.contains(field), where + ": no \"" + field + "\" field");
  QUARTET_CHECK(j[field].is_string(),
                where + ": \"" + field + "\" is " + std::string(j[field].type_name()) + ", not a string");
  return j[field].get<std::string>();
}

SftRow plain_row(const nlohmann::json& j, const std::string& where, const std::string& prompt_field,
                 const std::string& response_field) {
  QUARTET_CHECK(!j.contains("prompt_ids") && !j.contains("input_ids"),
                where + ": a row with token ids, but the file has no prepared-sft header (a prompts file from "
                        "prepare_prompts.py? sft reads what inputs/prepare/prepare_sft.py writes)");
  SftRow r;
  r.where = where;
  r.prompt = string_field(j, prompt_field, where);
  r.response = string_field(j, response_field, where);
  QUARTET_CHECK(!r.prompt.empty(), where + ": \"" + prompt_field + "\" is empty");
  QUARTET_CHECK(!r.response.empty(), where + ": \"" + response_field + "\" is empty: nothing to learn");
  return r;
}

std::vector<int64_t> token_ids(const nlohmann::json& j, const std::string& where) {
  QUARTET_CHECK(j.contains("input_ids") && j["input_ids"].is_array(), where + ": no \"input_ids\" list");
  const nlohmann::json& ids = j["input_ids"];
  QUARTET_CHECK(ids.size() >= 2, where + ": \"input_ids\" has " + std::to_string(ids.size()) +
                                     " tokens; a demonstration needs a prompt and a response");
  std::vector<int64_t> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    QUARTET_CHECK(ids[k].is_number_integer() && ids[k].get<int64_t>() >= 0,
                  where + ": \"input_ids\"[" + std::to_string(k) + "] is " + ids[k].dump() + ", not a token id");
    out.push_back(ids[k].get<int64_t>());
  }
  return out;
}

std::vector<uint8_t> loss_mask(const nlohmann::json& j, size_t tokens, const std::string& where) {
  QUARTET_CHECK(j.contains("loss_mask") && j["loss_mask"].is_array(), where + ": no \"loss_mask\" list");
  const nlohmann::json& mask = j["loss_mask"];
  QUARTET_CHECK(mask.size() == tokens, where + ": \"loss_mask\" has " + std::to_string(mask.size()) +
                                           " entries for " + std::to_string(tokens) + " input_ids");
  std::vector<uint8_t> out;
  out.reserve(tokens);
  for (size_t k = 0; k < tokens; ++k) {
    const bool bit = mask[k].is_number_integer() && (mask[k].get<int64_t>() == 0 || mask[k].get<int64_t>() == 1);
    QUARTET_CHECK(bit, where + ": \"loss_mask\"[" + std::to_string(k) + "] is " + mask[k].dump() + ", not 0 or 1");
    out.push_back(static_cast<uint8_t>(mask[k].get<int64_t>()));
  }
  QUARTET_CHECK(out[0] == 0, where + ": \"loss_mask\"[0] is 1, but the first token has nothing before it to "
                                     "predict it");
  return out;
}

SftRow prepared_row(const nlohmann::json& j, const std::string& where) {
  QUARTET_CHECK(j.is_object(), where + ": expected a JSON object, found " + std::string(j.type_name()));
  QUARTET_CHECK(!is_header(j), where + ": a second prepared-sft header (files joined together? prepare them "
                                       "together instead)");
  SftRow r;
  r.where = where;
  r.prompt = string_field(j, "prompt", where);
  r.response = string_field(j, "response", where);
  r.ids = token_ids(j, where);
  r.loss_mask = loss_mask(j, r.ids.size(), where);
  QUARTET_CHECK(j.contains("prompt_length") && j["prompt_length"].is_number_integer(),
                where + ": no integer \"prompt_length\" (the tokens before the final response)");
  r.prompt_length = j["prompt_length"].get<int64_t>();
  const int64_t n = static_cast<int64_t>(r.ids.size());
  QUARTET_CHECK(r.prompt_length >= 1 && r.prompt_length < n,
                where + ": \"prompt_length\" is " + std::to_string(r.prompt_length) + "; expected 1 .. " +
                    std::to_string(n - 1) + " for " + std::to_string(n) + " input_ids");
  bool response_counted = false;
  for (int64_t k = r.prompt_length; k < n; ++k) response_counted = response_counted || r.loss_mask[k];
  QUARTET_CHECK(response_counted, where + ": \"loss_mask\" counts no token of the final response (from prompt_length "
                                          "on): nothing to learn");
  return r;
}

}  // namespace

std::optional<PromptFileHeader> read_sft_header(const std::string& path) {
  std::ifstream in(path);
  QUARTET_CHECK(in.good(), "cannot read demonstrations file '" + path + "'");
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(__FILE__, __LINE__, where + ": not JSON (" + e.what() + ")");
    }
    if (!is_header(j)) return std::nullopt;
    return parse_prepared_header(j, where, kHeaderKey, "prepared-sft");
  }
  return std::nullopt;
}

std::vector<SftRow> read_sft_rows(const std::string& path, const std::string& prompt_field,
                                  const std::string& response_field) {
  QUARTET_CHECK(std::ifstream(path).good(), "cannot read demonstrations file '" + path + "'");
  const bool prepared = read_sft_header(path).has_value();
  bool header_seen = false;
  std::vector<SftRow> rows;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, std::int64_t) {
    if (prepared && !header_seen) {
      header_seen = true;
      return;
    }
    if (prepared) {
      rows.push_back(prepared_row(j, where));
      return;
    }
    QUARTET_CHECK(j.is_object(), where + ": expected a JSON object, found " + std::string(j.type_name()));
    QUARTET_CHECK(!is_header(j), where + ": a prepared-sft header after the first line");
    rows.push_back(plain_row(j, where, prompt_field, response_field));
  });
  QUARTET_CHECK(!rows.empty(), "demonstrations file '" + path + "' holds no rows");
  return rows;
}

}  // namespace quartet
