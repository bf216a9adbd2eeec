#pragma once
// A step's demonstrations as micro-batches, bucketed by length. The model has no attention that
// keeps packed sequences apart (its fused SDPA path is causal over the whole row, and a
// block-diagonal mask would take the masked path and its [m, T, T] bias), so sequences are not
// packed: the step's rows are sorted by length, longest first, and cut into micro-batches of at
// most train.micro_batch rows, or (sft.micro_batch_tokens > 0) of as many rows as fit that many
// padded tokens; each micro-batch is right-padded to its own longest row. Right padding behind
// causal attention is invisible to every real token and positions count real tokens only, so
// each sequence's loss is what it would be alone (docs/sft.md, tested); the padding costs only
// compute, which sorting keeps small.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/sft_dataset.hpp"

namespace quartet {

struct SftMicroBatch {
  torch::Tensor ids;        // int64 [m, T], pad_id after each row's tokens
  torch::Tensor attention;  // int64 [m, T], 1 for tokens
  torch::Tensor targets;    // float32 [m, T - 1]: 1 where token t + 1 is a target (the logits at t predict it)
  int64_t target_tokens = 0;  // the targets' sum
  int64_t tokens = 0;         // real tokens (padding not counted)
  int64_t rows() const { return ids.size(0); }
};

// The micro-batches of `rows` (this rank's rows of one step), on `device`.
std::vector<SftMicroBatch> bucket_examples(const std::vector<const SftExample*>& rows, int64_t max_rows,
                                           int64_t max_tokens, int64_t pad_id, torch::Device device);

// One micro-batch through a causal LM: the summed negative log-likelihood of its targets (with
// the graph, for backward) and the number of them its argmax predicts (detached), both float32
// 0-dim tensors on the model's device. The softmax spans the model's whole vocabulary.
struct SftLoss {
  torch::Tensor nll_sum;
  torch::Tensor correct;
};
SftLoss sft_loss(ShardedModel& model, const SftMicroBatch& mb);

}  // namespace quartet
