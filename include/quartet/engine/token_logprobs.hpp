#pragma once
// Per-token log-probs and entropies of a causal LM's logits, the quantities every stage's
// scoring and losses start from (engine/experience.hpp, rl/losses.hpp, tune/sft_batches.hpp).
#include <torch/types.h>

namespace quartet {

// log softmax(logits)[token] without materialising the whole log-softmax in float32 at once:
// logits [B, T, V] (any float dtype), tokens [B, T] -> float32 [B, T]. Works on blocks of about
// 2^24 logits converted to float32 one at a time, forward and backward (a custom autograd
// function that keeps only the logits); the gradient comes back in the logits' dtype.
// Tokens must lie in [0, V), also at padded positions.
torch::Tensor token_logprobs(const torch::Tensor& logits, const torch::Tensor& tokens);
// Entropy of softmax(logits) per position, float32 [B, T]; blocked and differentiable the same way.
torch::Tensor token_entropy(const torch::Tensor& logits);

}  // namespace quartet
