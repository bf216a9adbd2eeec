#pragma once
// One rank's rollout batch and the forward passes that score it.
//
// A rollout row is a left-padded prompt followed by the generated tokens: sequences and
// attention_mask are [B, P + A], action_mask [B, A] marks the generated tokens up to and
// including the stop token. The log-prob of action t comes from the logits at position
// P + t - 1; the critic's value for action t is its value at the same position (the state
// before the action), as OpenRLHF takes them.
//
// Forward passes over a sharded model are collective over its group: every rank must make the
// same number of them. The scoring helpers therefore agree on the number of micro-batches
// across the group first and run empty ones (one pad token, result discarded) where a rank
// has fewer rows.
#include <torch/types.h>

#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/sharded_model.hpp"

namespace quartet {

struct RolloutBatch {
  torch::Tensor sequences, attention_mask, action_mask;
  int64_t rows() const { return sequences.defined() ? sequences.size(0) : 0; }
  int64_t actions() const { return action_mask.size(1); }
  int64_t prompt_len() const { return sequences.size(1) - action_mask.size(1); }
};

// Rollout widths come in steps of this many tokens. Every new sequence width costs the first
// forward and backward of that shape a new cuDNN attention plan (tens of milliseconds, longer
// where a kernel is compiled), and cuBLAS and the caching allocator their own first-use work;
// with completions of any length each iteration would meet new widths. Padded to a multiple
// of 64, a run sees at most (prompt + new tokens) / 64 of them.
constexpr int64_t kRolloutWidthMultiple = 64;

// The widest rollout the deck allows: rollout.max_prompt_tokens + rollout.max_new_tokens (the
// cap of the width buckets).
int64_t max_rollout_width(const RolloutConfig& rollout);
// The action width >= actions that makes prompt_len + actions a multiple of
// kRolloutWidthMultiple, or max_width - prompt_len where that is smaller (max_width: the widest
// rollout the deck allows, max_prompt_tokens + max_new_tokens; 0 = no bucketing).
int64_t bucketed_actions(int64_t prompt_len, int64_t actions, int64_t max_width);
// b with its actions right-padded (masked, pad_id) to `actions` >= b.actions() columns.
RolloutBatch pad_actions(const RolloutBatch& b, int64_t actions, int64_t pad_id);

// Pieces of different prompt and action lengths as one batch: prompts left-padded to the
// longest, actions right-padded (masked) to the longest, then to bucketed_actions(max_width).
RolloutBatch concat_rollouts(const std::vector<RolloutBatch>& pieces, int64_t pad_id, int64_t max_width = 0);
// The action width of concat_rollouts(pieces, ., max_width), without building the batch.
int64_t concat_actions(const std::vector<RolloutBatch>& pieces, int64_t max_width = 0);
// Rows [begin, begin + count) of `values` [R, Am] cut back to each piece's rows and actions.
std::vector<torch::Tensor> split_by_pieces(const torch::Tensor& values, const std::vector<RolloutBatch>& pieces);

// The largest of every group member's `mine`.
int64_t group_max(Collectives& group, int64_t mine);

// The distribution the actions' log-probs describe, the old ones (at sampling time), the new
// ones (in the update) and the reference's alike: the logits of the tokenizer's ids only
// (vocab_limit > 0: the first vocab_limit; generation never picks the others) divided by the
// sampling temperature (1 for greedy). With a tokenizer as wide as the model and temperature 1,
// the model's own distribution. Top-k, top-p and min_new_tokens narrow what generation draws
// from, but not this: they are no part of the policy being trained (verl and OpenRLHF take
// their log-probs the same way), and the old and new log-probs of an action agree exactly until
// the weights change (docs/training.md, "Which distribution the log-probs are of").
struct SamplingView {
  int64_t vocab_limit = 0;
  double temperature = 1.0;
};

// How a scoring call splits its rows into forward passes: `rows` rows a pass (0 = all), each
// pass padded to its longest row; or, with tokens > 0, consecutive rows packed back to back
// without padding (engine/packed_rollouts.hpp), at most `tokens` tokens a pass (a longer row
// alone), so that a pass costs what its tokens cost (rollout.score_tokens).
struct ScorePasses {
  int64_t rows = 0;
  int64_t tokens = 0;
  ScorePasses(int64_t rows_ = 0, int64_t tokens_ = 0) : rows(rows_), tokens(tokens_) {}  // NOLINT: from a row count
};

// float32 [B, A]: log-probs of the actions under a causal LM (no grad).
torch::Tensor score_logprobs(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes,
                             const SamplingView& view);
// score_logprobs straight after generation, on generation's cache (SamplingParams::keep_cache,
// with room for P + A - 1 slots): it still holds every row's prompt, so only positions
// P-1 .. P+A-2 run through the model, attending to the prompt's cached keys and values, and
// the prompt is not computed a second time (rollout.reuse_prompt_cache). The model must be
// gathered whole on this rank (ShardedModel::gather_full, as for generation): no collectives
// run. The cache's slots from P - 1 on are overwritten. Equal to score_logprobs to rounding.
// The cache pass runs passes.rows rows at a time (it is not packed).
torch::Tensor score_logprobs_on_cache(ShardedModel& model, const RolloutBatch& batch, const KVCache& cache,
                                      const ScorePasses& passes, const SamplingView& view);
// float32 [B, A]: the critic's values of the states before each action (no grad).
torch::Tensor score_values(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes);
// float32 [B]: a sequence-reward model's scores (no grad).
torch::Tensor score_sequences(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes);

// With grad, for the updates: the log-probs (and, when `entropy` is given, the entropies) of
// the actions of `batch`'s rows, and the critic's values. padding: padding_layout(batch), or
// anywhere (the mask; ShardedModel::forward).
torch::Tensor action_logprobs(ShardedModel& model, const RolloutBatch& batch, const SamplingView& view,
                              torch::Tensor* entropy = nullptr, PaddingLayout padding = PaddingLayout::anywhere);
torch::Tensor action_values(ShardedModel& model, const RolloutBatch& batch,
                            PaddingLayout padding = PaddingLayout::anywhere);
// The same over the batch's rows packed without padding (engine/packed_rollouts.hpp): [B, A], zero
// where action_mask is.
torch::Tensor action_logprobs_packed(ShardedModel& model, const RolloutBatch& batch, const SamplingView& view,
                                     torch::Tensor* entropy = nullptr);
torch::Tensor action_values_packed(ShardedModel& model, const RolloutBatch& batch);

// Where the batch's padding lies: trailing when every row is real tokens then padding (prompts
// of one length), around when every row is padding, real tokens, padding (left-padded prompts),
// else anywhere (a hole between real tokens). Attention then runs without a mask
// (PaddingLayout, model/transformer.hpp). One read-back when the mask is on a device.
// kernels.unmasked_attention = false (the deck) makes it anywhere for every batch.
PaddingLayout padding_layout(const RolloutBatch& batch);

// Rows [begin, begin + count) of every tensor of the batch (views).
RolloutBatch select_range(const RolloutBatch& batch, int64_t begin, int64_t count);
// Rows `index` (int64, any device) of every tensor of the batch.
RolloutBatch select_rows(const RolloutBatch& batch, const torch::Tensor& index);
// The batch's tensors on `device` (no copy for those already there).
RolloutBatch on_device(const RolloutBatch& batch, torch::Device device);

}  // namespace quartet
