#include "quartet/rl/rewards/reward_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

// A completion cut inside a multi-byte character is not valid UTF-8: replaced (U+FFFD) rather
// than refused, as a Python reader decoding with errors="replace" would see it.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json samples_json(const std::vector<RewardSample>& batch) {
  json samples = json::array();
  for (const auto& s : batch) samples.push_back(sample_json(s));
  return samples;
}

std::string row_text(const RewardSample& s) {
  return s.row >= 0 ? "prompt row " + std::to_string(s.row) + " of rollout.prompts" : "a prompt without a row";
}

}  // namespace

json sample_json(const RewardSample& s) {
  return {{"row", s.row >= 0 ? json(s.row) : json(nullptr)},
          {"prompt", s.prompt},
          {"completion", s.completion},
          {"answer", s.answer},
          {"metadata", s.metadata}};
}

std::string program_request(int64_t id, const std::vector<RewardSample>& batch) {
  const json request = {{"version", kRewardProtocolVersion}, {"id", id}, {"samples", samples_json(batch)}};
  return dump(request) + "\n";
}

std::string endpoint_request(const std::vector<RewardSample>& batch) {
  json query = json::array(), prompts = json::array(), labels = json::array();
  for (const auto& s : batch) {
    query.push_back(s.prompt + s.completion);
    prompts.push_back(s.prompt);
    labels.push_back(s.answer.is_string() ? s.answer : json(s.answer.is_null() ? "" : dump(s.answer)));
  }
  const json body = {{"query", query},
                     {"prompts", prompts},
                     {"labels", labels},
                     {"version", kRewardProtocolVersion},
                     {"samples", samples_json(batch)}};
  return dump(body);
}

std::vector<double> scores_from(const json& list, const std::vector<RewardSample>& batch, const std::string& who) {
  if (!list.is_array())
    fail(__FILE__, __LINE__, who + ": the scores are not a list but " + dump(list).substr(0, 200));
  if (list.size() != batch.size())
    fail(__FILE__, __LINE__, who + ": " + std::to_string(list.size()) + " scores came back for " +
                                 std::to_string(batch.size()) + " samples (" + batch_rows(batch) + ")");
  std::vector<double> scores;
  scores.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const json& v = list[i];
    // JSON has no NaN or infinity; a number too large for a double parses as one.
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      char number[32];
      if (v.is_number()) std::snprintf(number, sizeof number, "%g", v.get<double>());
      fail(__FILE__, __LINE__, who + ": score " + std::to_string(i) + " (" + row_text(batch[i]) + ") is " +
                                   (v.is_number() ? std::string(number) : dump(v).substr(0, 200)) +
                                   ", not a finite number");
    }
    scores.push_back(v.get<double>());
  }
  return scores;
}

std::string batch_rows(const std::vector<RewardSample>& batch) {
  // Each prompt once, in order of first appearance (its samples are usually side by side).
  std::vector<int64_t> rows;
  for (const auto& s : batch)
    if (std::find(rows.begin(), rows.end(), s.row) == rows.end()) rows.push_back(s.row);
  constexpr std::size_t kShown = 8;
  std::string text;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == kShown && rows.size() > kShown + 1) {
      text += ", ...";
      i = rows.size() - 1;
    }
    text += (i == 0 ? "" : ", ") + (rows[i] >= 0 ? std::to_string(rows[i]) : std::string("?"));
  }
  return std::string(rows.size() == 1 ? "prompt row " : "prompt rows ") + text + " (" + std::to_string(batch.size()) +
         " sample" + (batch.size() == 1 ? "" : "s") + ")";
}

std::string nonfinite_in_reply(const std::string& text, const std::vector<RewardSample>& batch) {
  static const std::regex token(R"(([\[,:]\s*)(-?(?:NaN|Infinity)))");
  std::smatch m;
  if (!std::regex_search(text, m, token)) return "";
  const std::size_t at = static_cast<std::size_t>(m.position(2));
  std::string where = m.str(2);
  // Its place in the scores' array: the commas at the array's own depth before it.
  static const std::regex array(R"x("(scores|rewards)"\s*:\s*\[)x");
  std::smatch a;
  if (std::regex_search(text, a, array) && static_cast<std::size_t>(a.position(0) + a.length(0)) <= at) {
    std::size_t index = 0;
    int depth = 0;
    for (std::size_t i = static_cast<std::size_t>(a.position(0) + a.length(0)); i < at; ++i) {
      if (text[i] == '[' || text[i] == '{') ++depth;
      else if (text[i] == ']' || text[i] == '}') --depth;
      else if (text[i] == ',' && depth == 0) ++index;
    }
    where += " at " + a.str(1) + "[" + std::to_string(index) + "]";
    if (index < batch.size()) where += " (prompt row " + std::to_string(batch[index].row) + ")";
  }
  return where;
}

std::string json_reason(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const std::size_t tag_end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos ? what.substr(tag_end + 2) : what;
}

std::string quoted_lines(const std::string& text, std::size_t lines, std::size_t width) {
  if (text.empty()) return "\n    (nothing)";
  std::string out;
  std::size_t start = 0, shown = 0;
  while (start < text.size() && shown < lines) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.size() > width) line = line.substr(0, width) + "...";
    out += "\n    | " + line;
    ++shown;
    start = end + 1;
  }
  if (start < text.size()) out += "\n    | ...";
  return out;
}

}  // namespace quartet
