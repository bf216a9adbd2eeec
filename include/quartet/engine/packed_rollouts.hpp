#pragma once
// A rollout batch packed for padding-free forward passes (model/packed_sequences.hpp): each
// row's real tokens back to back, and where each action's log-prob or value is read from.
// A pass over the packed rows costs what their tokens cost, whatever the padding around them.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "quartet/engine/experience.hpp"
#include "quartet/model/packed_sequences.hpp"

namespace quartet {

struct PackedRollouts {
  PackedSequences seqs;
  torch::Tensor predict_at;   // [M] int64: the packed token whose output predicts each action
  torch::Tensor action_ids;   // [M] int64: the actions (action_mask != 0), row by row
  torch::Tensor action_cell;  // [M] int64: each action's flat index r * A + t in [B, A]
  torch::Tensor last_at;      // [n] int64: each packed sequence's last token
  int64_t rows = 0, actions = 0;
};

// The real tokens of each row (attention_mask's ones); lengths: the rows' token counts (host).
PackedRollouts pack_rollouts(const RolloutBatch& batch, const std::vector<int64_t>& lengths);
// Each row's token count (attention_mask's sum), read back once.
std::vector<int64_t> row_lengths(const RolloutBatch& batch);
// Per-action results [M] (or [1, M]) into the [B, A] grid, zero where no action is; keeps grad.
torch::Tensor unpack_actions(const torch::Tensor& per_action, const PackedRollouts& packed);

// Consecutive rows [begin, end) of at most `budget` tokens each (a row longer than the budget
// alone), in order: the passes of a packed scoring call.
std::vector<std::pair<int64_t, int64_t>> token_passes(const std::vector<int64_t>& lengths, int64_t budget);

}  // namespace quartet
