#include "quartet/tune/pair_scoring.hpp"

#include <torch/types.h>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

PairValues split(const torch::Tensor& values) {
  auto [chosen, rejected] = split_sides(values);
  return {chosen, rejected};
}

void check_head(ShardedModel& model, Head head, const char* fn) {
  QUARTET_CHECK(model.module()->head() == head, std::string(fn) + ": the model needs the " + head_name(head) +
                                                    " head, not " + head_name(model.module()->head()));
}

}  // namespace

PairValues pair_scores(ShardedModel& reward, const PairBatch& batch) {
  check_head(reward, Head::sequence_reward, "pair_scores");
  const RolloutBatch both = on_device(both_sides(batch), reward.device());
  // The head reads the mask: each row's score is at its last real token.
  return split(reward.forward(both.sequences, both.attention_mask, /*head_from=*/0, padding_layout(both))
                   .to(torch::kFloat32));
}

PairValues pair_logps(ShardedModel& policy, const PairBatch& batch, const SamplingView& view, PreferenceLossKind kind) {
  check_head(policy, Head::causal_lm, "pair_logps");
  const RolloutBatch both = both_sides(batch);
  const auto tokens = action_logprobs(policy, both, view, nullptr, padding_layout(both));
  return split(sequence_logps(tokens, both.action_mask, kind));
}

PairValues score_pairs(ShardedModel& reward, const PairBatch& batch, int64_t micro_batch) {
  check_head(reward, Head::sequence_reward, "score_pairs");
  return split(score_sequences(reward, both_sides(batch), micro_batch));
}

PairValues score_pair_logps(ShardedModel& model, const PairBatch& batch, int64_t micro_batch, const SamplingView& view,
                            PreferenceLossKind kind) {
  check_head(model, Head::causal_lm, "score_pair_logps");
  const RolloutBatch both = both_sides(batch);
  const auto tokens = score_logprobs(model, both, micro_batch, view);
  return split(sequence_logps(tokens, both.action_mask, kind));
}

}  // namespace quartet
