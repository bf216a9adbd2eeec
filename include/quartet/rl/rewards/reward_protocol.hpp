#pragma once
// The JSON that rewards in the user's own code read and write, version 1
// (docs/reward-programs.md is the reference a user reads):
//
//   a sample   {"row": 17, "prompt": "...", "completion": "...", "answer": "..." | null,
//               "metadata": {...} | null}
//   command:   one line per batch to the program's stdin
//                {"version": 1, "id": 7, "samples": [sample, ...]}
//              one line back on its stdout
//                {"id": 7, "scores": [0.0, 1.0, ...]}    or    {"id": 7, "error": "why"}
//   http:      the body of one POST per batch, OpenRLHF's remote reward model request plus the
//              samples: {"query": [prompt + completion, ...], "prompts": [...],
//              "labels": [answer or "", ...], "version": 1, "samples": [sample, ...]}
//              and back {"rewards": [...]} (OpenRLHF) or {"scores": [...]}.
//
// Scores: one finite number per sample, in the order of the samples.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

constexpr int kRewardProtocolVersion = 1;

nlohmann::json sample_json(const RewardSample& sample);
// The command: request, one line ending in '\n' (JSON escapes every newline inside strings).
std::string program_request(int64_t id, const std::vector<RewardSample>& batch);
// The http: request body.
std::string endpoint_request(const std::vector<RewardSample>& batch);

// The scores in `list` (the reply's "scores" or "rewards"): exactly batch.size() finite
// numbers. Otherwise a quartet::Error whose message begins with `who` and says what is wrong:
// not a list, how many scores came for how many samples, or which score (and the prompt row of
// its sample) is not a finite number.
std::vector<double> scores_from(const nlohmann::json& list, const std::vector<RewardSample>& batch,
                                const std::string& who);

// "prompt rows 3, 17, 22 (12 samples)", "prompt rows 3, 17, 8, 41, 5, 6, 7, 9, ..., 90 (64
// samples)", "prompt row 4 (1 sample)": the prompts of a batch, each once, for a failure that no
// one row is at fault for.
std::string batch_rows(const std::vector<RewardSample>& batch);

// For a reply that is not JSON because it holds NaN or Infinity (Python's json.dumps writes them
// for float('nan') and float('inf'); JSON has neither): "NaN at scores[3] (prompt row 17)", or
// "" when it holds none.
std::string nonfinite_in_reply(const std::string& text, const std::vector<RewardSample>& batch);

// The parser's reason without its "[json.exception.parse_error.101] " tag.
std::string json_reason(const nlohmann::json::exception& e);

// Up to `lines` lines of `text`, each cut at `width` characters, each on a line of its own
// beginning "\n    | " for an error message; "\n    (nothing)" for an empty text.
std::string quoted_lines(const std::string& text, std::size_t lines, std::size_t width = 200);

}  // namespace quartet
