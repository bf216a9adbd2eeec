#pragma once
// The per-sequence quantities of the pairwise stages, on the sharded models, for a batch of
// preference pairs (tune/pair_dataset.hpp): both sides run through the model as one batch
// (both_sides: chosen rows, then rejected rows) and come back split.
//   reward model  the score of each side: the sequence_reward head at the row's last real token
//                 (its response's last token), as engine/experience.hpp's score_sequences scores
//                 rollouts and Hugging Face's *ForSequenceClassification scores a sequence;
//   policy, reference  each side's log-prob: the response tokens' log-probs under
//                 engine/experience.hpp's SamplingView, summed (DPO) or averaged (IPO), as
//                 tune/pair_losses.hpp's sequence_logps says.
// The training forms keep the graph (one forward of 2N rows; backward through ShardedModel);
// the scoring forms run without grad in micro-batches of `micro_batch` rows and are collective
// over the model's group like every scoring pass (every rank makes the same number of calls).
#include <torch/types.h>

#include "quartet/engine/experience.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/pair_dataset.hpp"
#include "quartet/tune/pair_losses.hpp"

namespace quartet {

struct PairValues {
  torch::Tensor chosen, rejected;  // float32 [N] each
};

// With grad: the reward model's scores of each side.
PairValues pair_scores(ShardedModel& reward, const PairBatch& batch);
// With grad: each side's sequence log-prob under the policy.
PairValues pair_logps(ShardedModel& policy, const PairBatch& batch, const SamplingView& view, PreferenceLossKind kind);

// Without grad, micro-batched: the same for a frozen model (the reference, a reward model being
// evaluated).
PairValues score_pairs(ShardedModel& reward, const PairBatch& batch, int64_t micro_batch);
PairValues score_pair_logps(ShardedModel& model, const PairBatch& batch, int64_t micro_batch,
                            const SamplingView& view, PreferenceLossKind kind);

}  // namespace quartet
