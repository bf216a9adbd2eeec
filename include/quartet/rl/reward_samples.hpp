#pragma once
// An iteration's rollout rows as text rewards see them (rl/reward_function.hpp).
#include <string>
#include <vector>

#include "quartet/rl/iteration.hpp"
#include "quartet/rl/reward_function.hpp"

namespace quartet {

// One sample per row of `it` (actor ranks, after the completions are decoded): the prompt text,
// the completion, the prompt row's "answer" (else its answer column; null when it has none) and its other fields as
// metadata (the row without `prompt_field` and "answer"; null when nothing is left).
std::vector<RewardSample> reward_samples(const Iteration& it, const std::string& prompt_field);

}  // namespace quartet
