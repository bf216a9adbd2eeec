#pragma once
// Preference-pair files (docs/data.md, "Pair files"): JSONL, one (prompt, chosen, rejected) pair
// a line, of two kinds.
//   plain     {"prompt": "...", "chosen": "...", "rejected": "...", "margin": 0.5} a line: texts,
//             tokenized by quartet with the run's tokenizer (tune/pair_dataset.hpp says how);
//   prepared  what inputs/prepare/prepare_pairs.py writes: a header line
//               {"quartet_pairs": 1, "tokenizer": {"sha256", "source"},
//                "chat_template": {"applied", "sha256", "source"}, ...}
//             (the fields of a prepared prompts header, io/prompts.hpp), then one
//               {"prompt", "prompt_ids", "chosen", "chosen_ids", "rejected", "rejected_ids",
//                "margin", "messages", "metadata", "origin"}
//             a line, whose ids are used as they are: the prompt's, then each response's (what
//             the policy would generate after the prompt, its stop token included).
// In both, "margin" is optional (absent or null: none) and otherwise a finite number: the
// pair's Bradley–Terry margin. A file is prepared when its first non-blank line is an object
// with "quartet_pairs".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "quartet/io/prompts.hpp"

namespace quartet {

constexpr const char* kPairsHeaderKey = "quartet_pairs";

struct PairRecord {
  std::string prompt, chosen, rejected;  // the texts (a prepared row's as rendered)
  std::vector<int64_t> prompt_ids, chosen_ids, rejected_ids;  // a prepared row's; empty in a plain one
  std::optional<double> margin;
};

// The header of a prepared pairs file, or nullopt for a plain one. A malformed header is a
// quartet::Error naming the file, the line and the field; so is a prepared prompts file (its
// rows are no pairs).
std::optional<PromptFileHeader> read_pair_header(const std::string& path);

// A prepared row checked: an object with string "prompt", "chosen" and "rejected", non-empty
// lists of integers >= 0 "prompt_ids", "chosen_ids" and "rejected_ids", and a margin as above.
// Anything else is a quartet::Error beginning with `where` ("path:line") and naming the field.
PairRecord prepared_pair_row(const nlohmann::json& row, const std::string& where);
// A plain row: string "prompt" (not empty), "chosen" and "rejected", and a margin as above.
PairRecord plain_pair_row(const nlohmann::json& row, const std::string& where);

}  // namespace quartet
