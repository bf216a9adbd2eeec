#include "quartet/io/prompts.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

nlohmann::json parse_line(const std::string& line, const std::string& where) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    fail(__FILE__, __LINE__, where + ": not JSON (" + e.what() + ")");
  }
}

bool is_header(const nlohmann::json& j) { return j.is_object() && j.contains("quartet_prompts"); }

bool is_sha256(const nlohmann::json& v) {
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// "reward_model": {"tokenizer": {"sha256", "source"}, "chat_template": {"sha256", "source"} or
// null, "completion_transform": "none" | "strip" | "lstrip_newlines"}, each field checked by name.
RewardRendering parse_reward_rendering(const nlohmann::json& r, const std::string& bad) {
  QUARTET_CHECK(r.is_object(), bad + "\"reward_model\" is not an object");
  RewardRendering out;
  QUARTET_CHECK(r.contains("tokenizer") && r["tokenizer"].is_object(), bad + "no \"reward_model.tokenizer\" object");
  const nlohmann::json& tok = r["tokenizer"];
  QUARTET_CHECK(tok.contains("sha256") && is_sha256(tok["sha256"]),
                bad + "\"reward_model.tokenizer.sha256\" is not 64 lowercase hex digits");
  QUARTET_CHECK(tok.contains("source") && tok["source"].is_string(),
                bad + "\"reward_model.tokenizer.source\" is not a string");
  out.tokenizer_sha256 = tok["sha256"].get<std::string>();
  out.tokenizer_source = tok["source"].get<std::string>();
  QUARTET_CHECK(r.contains("chat_template"), bad + "no \"reward_model.chat_template\" (an object, or null)");
  const nlohmann::json& ct = r["chat_template"];
  if (!ct.is_null()) {
    QUARTET_CHECK(ct.is_object() && ct.contains("sha256") && is_sha256(ct["sha256"]),
                  bad + "\"reward_model.chat_template.sha256\" is not 64 lowercase hex digits");
    QUARTET_CHECK(ct.contains("source") && ct["source"].is_string(),
                  bad + "\"reward_model.chat_template.source\" is not a string");
    out.chat_template_sha256 = ct["sha256"].get<std::string>();
    out.chat_template_source = ct["source"].get<std::string>();
  }
  const nlohmann::json& t = r.contains("completion_transform") ? r["completion_transform"] : nlohmann::json();
  QUARTET_CHECK(t.is_string() && (t == "none" || t == "strip" || t == "lstrip_newlines"),
                bad + "\"reward_model.completion_transform\" is not one of none, strip, lstrip_newlines");
  out.completion_transform = t.get<std::string>();
  return out;
}

}  // namespace

// The header's fields, each checked by name (docs/data.md: the prepared prompts file).
PromptFileHeader parse_prepared_header(const nlohmann::json& j, const std::string& where, const std::string& key,
                                       const std::string& kind) {
  const std::string bad = where + ": a malformed " + kind + " header: ";
  PromptFileHeader h;
  h.where = where;
  const nlohmann::json& version = j[key];
  QUARTET_CHECK(version.is_number_integer(), bad + "\"" + key + "\" is " + std::string(version.type_name()) +
                                                 ", not the format version (1)");
  h.version = version.get<int>();
  QUARTET_CHECK(h.version == 1, bad + "\"" + key + "\" is version " + std::to_string(h.version) +
                                    "; this quartet reads version 1 (prepare the file again)");
  QUARTET_CHECK(j.contains("tokenizer") && j["tokenizer"].is_object(), bad + "no \"tokenizer\" object");
  const nlohmann::json& tok = j["tokenizer"];
  QUARTET_CHECK(tok.contains("sha256") && is_sha256(tok["sha256"]),
                bad + "\"tokenizer.sha256\" is not 64 lowercase hex digits (the SHA-256 of tokenizer.json)");
  QUARTET_CHECK(tok.contains("source") && tok["source"].is_string(), bad + "\"tokenizer.source\" is not a string");
  h.tokenizer_sha256 = tok["sha256"].get<std::string>();
  h.tokenizer_source = tok["source"].get<std::string>();
  QUARTET_CHECK(j.contains("chat_template") && j["chat_template"].is_object(), bad + "no \"chat_template\" object");
  const nlohmann::json& ct = j["chat_template"];
  QUARTET_CHECK(ct.contains("applied") && ct["applied"].is_boolean(),
                bad + "\"chat_template.applied\" is not true or false");
  h.chat_template_applied = ct["applied"].get<bool>();
  if (h.chat_template_applied) {
    QUARTET_CHECK(ct.contains("sha256") && is_sha256(ct["sha256"]),
                  bad + "\"chat_template.sha256\" is not 64 lowercase hex digits (the SHA-256 of the template)");
    QUARTET_CHECK(ct.contains("source") && ct["source"].is_string(), bad + "\"chat_template.source\" is not a string");
    h.chat_template_sha256 = ct["sha256"].get<std::string>();
    h.chat_template_source = ct["source"].get<std::string>();
  }
  if (j.contains("reward_model")) h.reward = parse_reward_rendering(j["reward_model"], bad);
  return h;
}

namespace {

PromptFileHeader parse_header(const nlohmann::json& j, const std::string& where) {
  return parse_prepared_header(j, where, "quartet_prompts", "prepared-prompts");
}

}  // namespace

void for_each_json_line(const std::string& path,
                        const std::function<void(const nlohmann::json&, const std::string&, std::int64_t)>& fn) {
  std::ifstream in(path);
  QUARTET_CHECK(in.good(), "cannot read prompts file '" + path + "'");
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    // Blank lines (a trailing newline, a separator) are skipped.
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(n);
    fn(parse_line(line, where), where, n);
  }
}

std::optional<PromptFileHeader> read_prompt_header(const std::string& path) {
  std::ifstream in(path);
  QUARTET_CHECK(in.good(), "cannot read prompts file '" + path + "'");
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(n);
    const nlohmann::json j = parse_line(line, where);
    if (!is_header(j)) return std::nullopt;
    return parse_header(j, where);
  }
  return std::nullopt;
}

std::vector<int64_t> prepared_row_ids(const nlohmann::json& j, const std::string& where) {
  QUARTET_CHECK(j.is_object(), where + ": expected a JSON object, found " + std::string(j.type_name()));
  QUARTET_CHECK(!is_header(j), where + ": a second prepared-prompts header (files joined together? "
                                       "prepare them together instead)");
  QUARTET_CHECK(j.contains("prompt") && j["prompt"].is_string(), where + ": expected a string \"prompt\"");
  QUARTET_CHECK(j.contains("prompt_ids") && j["prompt_ids"].is_array(),
                where + ": no \"prompt_ids\" list (every row of a prepared file has its token ids)");
  const nlohmann::json& ids = j["prompt_ids"];
  QUARTET_CHECK(!ids.empty(), where + ": \"prompt_ids\" is empty");
  std::vector<int64_t> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    QUARTET_CHECK(ids[k].is_number_integer() && ids[k].get<int64_t>() >= 0,
                  where + ": \"prompt_ids\"[" + std::to_string(k) + "] is " + ids[k].dump() + ", not a token id");
    out.push_back(ids[k].get<int64_t>());
  }
  if (j.contains("answer") && !j["answer"].is_null())
    QUARTET_CHECK(j["answer"].is_string(),
                  where + ": \"answer\" is " + std::string(j["answer"].type_name()) + ", not a string");
  return out;
}

std::vector<Prompt> read_prompts(const std::string& path) {
  const bool prepared = read_prompt_header(path).has_value();
  bool header_seen = false;
  std::vector<Prompt> out;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, std::int64_t n) {
    if (prepared && !header_seen) {
      header_seen = true;
      return;
    }
    Prompt p;
    if (prepared) p.ids = prepared_row_ids(j, where);
    QUARTET_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                  where + ": expected an object with a string \"prompt\"");
    p.text = j["prompt"].get<std::string>();
    p.record = j.dump();
    p.line = static_cast<int>(n);
    out.push_back(std::move(p));
  });
  QUARTET_CHECK(!out.empty(), "prompts file '" + path + "' holds no prompts");
  return out;
}

}  // namespace quartet
