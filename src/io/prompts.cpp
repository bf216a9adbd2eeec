#include "quartet/io/prompts.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"

namespace quartet {

void for_each_json_line(const std::string& path,
                        const std::function<void(const nlohmann::json&, const std::string&, std::int64_t)>& fn) {
  std::ifstream in(path);
  QUARTET_CHECK(in.good(), "cannot read prompts file '" + path + "'");
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    // Blank lines (a trailing newline, a separator) are skipped.
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(__FILE__, __LINE__, where + ": not JSON (" + e.what() + ")");
    }
    fn(j, where, n);
  }
}

std::vector<Prompt> read_prompts(const std::string& path) {
  std::vector<Prompt> out;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, std::int64_t n) {
    QUARTET_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                  where + ": expected an object with a string \"prompt\"");
    out.push_back({j["prompt"].get<std::string>(), j.dump(), static_cast<int>(n)});
  });
  QUARTET_CHECK(!out.empty(), "prompts file '" + path + "' holds no prompts");
  return out;
}

}  // namespace quartet
