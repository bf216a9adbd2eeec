#pragma once
// An iteration's rollout rows as text rewards see them (rl/rewards/reward_function.hpp).
#include <string>
#include <vector>

#include "quartet/rl/iteration.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// Rows of completions with their prompts: every vector has one entry per completion.
struct RewardRows {
  const std::vector<std::string>& prompts;
  const std::vector<std::string>& completions;
  const std::vector<std::string>& answers;  // the prompt file's answer column ("" = none)
  const std::vector<std::string>& records;  // the prompt file's row as JSON ("" for HDF5 files)
  const std::vector<int64_t>& rows;         // each prompt's index in its file
};

// One sample per row: the prompt text, the completion, the prompt row's "answer" (else its
// answer column; null when it has none) and its other fields as metadata (the row without
// `prompt_field`, "prompt" and "answer"; null when nothing is left).
std::vector<RewardSample> reward_samples(const RewardRows& rows, const std::string& prompt_field);

// The rows of `it` (actor ranks, after the completions are decoded).
std::vector<RewardSample> reward_samples(const Iteration& it, const std::string& prompt_field);

}  // namespace quartet
