#pragma once
// Prompt datasets: JSONL files, one JSON object per line with at least {"prompt": "..."}.
// Other fields (an answer for a rule reward, say) are kept as JSON text for later stages.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace quartet {

struct Prompt {
  std::string text;
  std::string record;  // the whole line, as JSON
  int line = 0;
};

// Blank lines are skipped; a line that is not a JSON object with a string "prompt" is a
// quartet::Error naming the file and the line.
std::vector<Prompt> read_prompts(const std::string& path);

// Calls fn(value, "path:line", line) for every non-blank line of a JSONL file, in order. An
// unreadable file, or a line that is not JSON, is a quartet::Error naming the file (and line).
void for_each_json_line(const std::string& path,
                        const std::function<void(const nlohmann::json& value, const std::string& where,
                                                 std::int64_t line)>& fn);

}  // namespace quartet
