#pragma once
// Prompt files (docs/data.md): JSONL, one JSON object a line, of two kinds.
//   plain     {"prompt": "..."} a line; other fields (an answer for a rule reward, say) are kept
//             as JSON text for later stages; quartet tokenizes the text when it uses it.
//   prepared  what inputs/prepare/prepare_prompts.py writes: a header line
//               {"quartet_prompts": 1, "tokenizer": {"sha256", "source"},
//                "chat_template": {"applied", "sha256", "source"}, ...}
//             that names the tokenizer.json and chat template the rows were made with, then one
//               {"prompt": text, "prompt_ids": [ids], "answer": "...", "messages", "metadata", ...}
//             a line, whose prompt_ids are used as they are (never tokenized again).
// A file is prepared when its first non-blank line is an object with "quartet_prompts".
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace quartet {

// How a prepared prompts file's rows are rendered for a reward model whose tokenizer is not the
// actor's (prepare_prompts.py --reward-model): each row's "reward_prefix" and "reward_suffix" are
// the text that model's chat template puts before and after the reply (rl/rewards/reward_retokenizer.hpp).
struct RewardRendering {
  std::string tokenizer_sha256, tokenizer_source;           // the reward model's tokenizer.json
  std::string chat_template_sha256, chat_template_source;   // "" where it has no chat template
  // What the template does to the reply's text, which quartet does too: none | strip (Python's
  // str.strip, Jinja's trim) | lstrip_newlines (its leading newlines removed, as Qwen3's do).
  std::string completion_transform = "none";
};

struct PromptFileHeader {
  std::string where;  // "path:line" of the header, for messages
  int version = 1;
  std::string tokenizer_sha256;  // of the tokenizer.json's bytes the ids were made with
  std::string tokenizer_source;  // where that tokenizer.json was
  bool chat_template_applied = false;  // whether any row was rendered through the template
  std::string chat_template_sha256;    // of the template's UTF-8 text, when applied
  std::string chat_template_source;
  std::optional<RewardRendering> reward;  // the header's "reward_model", when the rows carry one
};

struct Prompt {
  std::string text;
  std::string record;  // the whole line, as JSON (a prepared row's answer, messages, metadata)
  int line = 0;
  std::vector<int64_t> ids;  // a prepared row's prompt_ids; empty in a plain file
};

// A prepared file's header (its version under `key`: "quartet_prompts", or another prepared
// kind's, e.g. "quartet_sft"), its fields checked as for prompts; errors begin with `where` and
// call it "a malformed <kind> header".
PromptFileHeader parse_prepared_header(const nlohmann::json& header, const std::string& where, const std::string& key,
                                       const std::string& kind);

// The header of a prepared file, or nullopt for a plain one. A header that is not what
// docs/data.md describes (a missing or mistyped field, an unknown version) is a quartet::Error
// naming the file, the line and the field.
std::optional<PromptFileHeader> read_prompt_header(const std::string& path);

// A prepared row checked: an object with a string "prompt", "prompt_ids" a non-empty list of
// integers >= 0, and "answer" a string when present (null counts as absent). Returns the ids;
// anything else is a quartet::Error beginning with `where` ("path:line").
std::vector<int64_t> prepared_row_ids(const nlohmann::json& row, const std::string& where);

// Every prompt of a plain or a prepared file (the header is not a prompt). Blank lines are
// skipped; a line that is not a JSON object with a string "prompt" (and, prepared, valid
// prompt_ids) is a quartet::Error naming the file and the line.
std::vector<Prompt> read_prompts(const std::string& path);

// Calls fn(value, "path:line", line) for every non-blank line of a JSONL file, in order. An
// unreadable file, or a line that is not JSON, is a quartet::Error naming the file (and line).
void for_each_json_line(const std::string& path,
                        const std::function<void(const nlohmann::json& value, const std::string& where,
                                                 std::int64_t line)>& fn);

}  // namespace quartet
