#pragma once
// Completions that ran out of room (DAPO, Yu et al. 2025): overlong filtering takes the
// truncated ones out of the policy loss (algorithm.overlong_filter), and the soft overlong
// penalty lowers the score of those that come close to rollout.max_new_tokens
// (algorithm.overlong_buffer, overlong_penalty_factor). Both act on the actor ranks, between the
// score and the advantages.
#include <torch/types.h>

#include <vector>

#include "quartet/engine/experience.hpp"

namespace quartet {

// bool [B]: rows that generated max_new_tokens tokens without ending in one of stop_ids (a row
// whose last allowed token is a stop token finished, and is not truncated). With no stop ids
// every row of max_new_tokens tokens is truncated.
torch::Tensor truncated_rows(const RolloutBatch& batch, const std::vector<int64_t>& stop_ids, int64_t max_new_tokens);

// float32 [B], <= 0: DAPO's soft overlong punishment of completions of `lengths` tokens (the
// stop token counted), as verl's overlong buffer: with L = max_new_tokens - buffer,
//   -factor * clamp((length - L) / buffer, 0, 1)
// i.e. nothing up to L tokens, then a linear ramp to -factor at max_new_tokens.
torch::Tensor overlong_penalty(const torch::Tensor& lengths, int64_t max_new_tokens, int64_t buffer, double factor);

}  // namespace quartet
