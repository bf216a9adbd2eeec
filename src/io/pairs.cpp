#include "quartet/io/pairs.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"

namespace quartet {

namespace {

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  QUARTET_CHECK(j.contains(key), where + ": no \"" + key + "\"");
  QUARTET_CHECK(j[key].is_string(),
                where + ": \"" + key + "\" is " + std::string(j[key].type_name()) + ", not a string");
  return j[key].get<std::string>();
}

std::vector<int64_t> ids_field(const nlohmann::json& j, const char* key, const std::string& where) {
  QUARTET_CHECK(j.contains(key) && j[key].is_array(),
                where + ": no \"" + key + "\" list (every row of a prepared pairs file has its token ids)");
  const nlohmann::json& ids = j[key];
  QUARTET_CHECK(!ids.empty(), where + ": \"" + key + "\" is empty");
  std::vector<int64_t> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    QUARTET_CHECK(ids[k].is_number_integer() && ids[k].get<int64_t>() >= 0,
                  where + ": \"" + key + "\"[" + std::to_string(k) + "] is " + ids[k].dump() + ", not a token id");
    out.push_back(ids[k].get<int64_t>());
  }
  return out;
}

std::optional<double> margin_field(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("margin") || j["margin"].is_null()) return std::nullopt;
  const nlohmann::json& m = j["margin"];
  QUARTET_CHECK(m.is_number() && std::isfinite(m.get<double>()),
                where + ": \"margin\" is " + m.dump() + ", not a finite number");
  return m.get<double>();
}

void check_object(const nlohmann::json& j, const std::string& where) {
  QUARTET_CHECK(j.is_object(), where + ": expected a JSON object, found " + std::string(j.type_name()));
  QUARTET_CHECK(!j.contains(kPairsHeaderKey), where + ": a second prepared-pairs header (files joined together? "
                                                      "prepare them together instead)");
}

}  // namespace

std::optional<PromptFileHeader> read_pair_header(const std::string& path) {
  std::ifstream in(path);
  QUARTET_CHECK(is_regular_file(path) && in.good(), "cannot read pairs file '" + path + "'");
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are skipped
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(__FILE__, __LINE__, where + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) return std::nullopt;  // the rows' check names it
    QUARTET_CHECK(!j.contains("quartet_prompts"), where + ": a prepared prompts file (header \"quartet_prompts\"), "
                                                  "not preference pairs (prepare pairs with inputs/prepare/prepare_pairs.py)");
    if (!j.contains(kPairsHeaderKey)) return std::nullopt;
    return parse_prepared_header(j, where, kPairsHeaderKey, "prepared-pairs");
  }
  return std::nullopt;
}

PairRecord prepared_pair_row(const nlohmann::json& j, const std::string& where) {
  check_object(j, where);
  PairRecord r;
  r.prompt = string_field(j, "prompt", where);
  r.chosen = string_field(j, "chosen", where);
  r.rejected = string_field(j, "rejected", where);
  r.prompt_ids = ids_field(j, "prompt_ids", where);
  r.chosen_ids = ids_field(j, "chosen_ids", where);
  r.rejected_ids = ids_field(j, "rejected_ids", where);
  r.margin = margin_field(j, where);
  return r;
}

PairRecord plain_pair_row(const nlohmann::json& j, const std::string& where) {
  check_object(j, where);
  PairRecord r;
  r.prompt = string_field(j, "prompt", where);
  QUARTET_CHECK(!r.prompt.empty(), where + ": \"prompt\" is empty");
  r.chosen = string_field(j, "chosen", where);
  r.rejected = string_field(j, "rejected", where);
  r.margin = margin_field(j, where);
  return r;
}

}  // namespace quartet
