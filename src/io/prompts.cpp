#include "quartet/io/prompts.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"

namespace quartet {

std::vector<Prompt> read_prompts(const std::string& path) {
  std::ifstream in(path);
  QUARTET_CHECK(in.good(), "cannot read prompts file '" + path + "'");
  std::vector<Prompt> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(__FILE__, __LINE__, where + ": not JSON (" + e.what() + ")");
    }
    QUARTET_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                  where + ": expected an object with a string \"prompt\"");
    out.push_back({j["prompt"].get<std::string>(), line, n});
  }
  QUARTET_CHECK(!out.empty(), "prompts file '" + path + "' holds no prompts");
  return out;
}

}  // namespace quartet
