#pragma once
// Prompt datasets: JSONL files, one JSON object per line with at least {"prompt": "..."}.
// Other fields (an answer for a rule reward, say) are kept as JSON text for later stages.
#include <string>
#include <vector>

namespace quartet {

struct Prompt {
  std::string text;
  std::string record;  // the whole line, as JSON
  int line = 0;
};

// Blank lines are skipped; a line that is not a JSON object with a string "prompt" is a
// quartet::Error naming the file and the line.
std::vector<Prompt> read_prompts(const std::string& path);

}  // namespace quartet
