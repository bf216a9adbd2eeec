#pragma once
// Demonstration files of `quartet sft` (docs/sft.md): JSONL, one JSON object a line, of two kinds.
//   plain     {"prompt": "...", "response": "..."} a line (the fields are the deck's
//             sft.prompt_field and sft.response_field; others are ignored); quartet tokenizes the
//             text (tune/sft_dataset.hpp).
//   prepared  what inputs/prepare/prepare_sft.py writes: a header line
//               {"quartet_sft": 1, "tokenizer": {"sha256", "source"},
//                "chat_template": {"applied", "sha256", "source"}, ...}
//             (the fields of a prepared prompts file's header, io/prompts.hpp), then one
//               {"prompt": text, "response": text, "input_ids": [ids], "loss_mask": [0 | 1],
//                "prompt_length": P, "messages", "metadata", "origin"}
//             a line. loss_mask marks the tokens the loss counts (the assistant's, of every turn);
//             input_ids[0, P) is the prompt of the final response, input_ids[P, ...) that
//             response (the held-out exact match generates from the first and compares with the
//             second).
// A file is prepared when its first non-blank line is an object with "quartet_sft". Every error
// names the file and the line, and the field.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quartet/io/prompts.hpp"

namespace quartet {

struct SftRow {
  std::string where;                // "path:line"
  std::string prompt, response;     // the text (a prepared row's as rendered)
  // Prepared rows only (empty in a plain file):
  std::vector<int64_t> ids;         // input_ids
  std::vector<uint8_t> loss_mask;   // 1 for the tokens the loss counts
  int64_t prompt_length = 0;        // tokens before the final response
};

// The header of a prepared file, or nullopt for a plain one; a malformed header is a
// quartet::Error naming the file, the line and the field.
std::optional<PromptFileHeader> read_sft_header(const std::string& path);

// Every row of a plain or a prepared file (the header is not a row). Blank lines are skipped.
// A plain row needs string fields `prompt_field` and `response_field`, neither empty; a prepared
// row the fields above, each checked (ids >= 0, loss_mask of the ids' length holding 0 and 1
// only, 0 for the first token, 1 somewhere from prompt_length on, 1 <= prompt_length < the
// ids' count). Anything else, or a file without rows, is a quartet::Error naming file and line.
std::vector<SftRow> read_sft_rows(const std::string& path, const std::string& prompt_field,
                                  const std::string& response_field);

}  // namespace quartet
