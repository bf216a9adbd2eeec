#pragma once
// The pieces `quartet dpo` runs pairs through (tune/dpo.hpp): which pairs a rank takes, a
// micro-batch of pairs as the engine carries it, and a pass that keeps a group's collectives in
// step.
//   chunks      pairs [0, count) cut in dataset order into chunks of `per_chunk`, chunk k going
//               to rank k mod ranks: a chunk is the same rows, padded the same way, however many
//               ranks share the work, so the numbers of a pair do not depend on the rank count
//               (the reference's log-probs, the held-out evaluation)
//   micro-batch both sides of its pairs (tune/pair_dataset.hpp's make_pair_batch: prompts
//               left-padded, responses right-padded) and the reference's sequence log-probs of
//               each side, in StageMicroBatch's tensors; its units are its pairs
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "quartet/engine/experience.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/pair_dataset.hpp"
#include "quartet/tune/stage.hpp"

namespace quartet {

// The chunks of rank `rank` of `ranks`, each a list of pair indices.
std::vector<std::vector<int64_t>> strided_chunks(int64_t count, int64_t per_chunk, int rank, int ranks);

// The reference's sequence log-probs of every pair of a dataset, by pair index.
struct ReferenceLogps {
  std::vector<float> chosen, rejected;
};

// Pairs `rows` of `pairs` as one micro-batch on `device`; `reference` may be empty (scoring the
// reference itself), then the micro-batch carries no reference tensors.
StageMicroBatch pair_micro_batch(const PairDataset& pairs, const std::vector<int64_t>& rows, int64_t pad_id,
                                 int64_t max_width, const ReferenceLogps& reference, torch::Device device);
// The pair batch a micro-batch carries, and its reference log-probs ([N] each; undefined when absent).
PairBatch dpo_batch_of(const StageMicroBatch& mb);
std::pair<torch::Tensor, torch::Tensor> reference_of(const StageMicroBatch& mb);

// A rank's scoring turn without pairs: one pad token through score_logprobs (its result dropped),
// the path a turn with pairs takes, so that the group's collectives line up.
void idle_scoring(ShardedModel& model, const SamplingView& view);

}  // namespace quartet
