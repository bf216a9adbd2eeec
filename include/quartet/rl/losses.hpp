#pragma once
// The losses of the policy and value updates, as masked means over action tokens (each
// micro-batch's mean over its action tokens, as OpenRLHF does). Shapes [B, T] as in
// advantages.hpp; every statistic returned is a detached scalar for the logs.
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

struct PolicyLoss {
  torch::Tensor loss;           // with grad: -mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A))
  torch::Tensor clip_fraction;  // share of action tokens whose ratio was clipped: where the clipped
                                // term is the one the min takes (OpenRLHF, trl)
  torch::Tensor approx_kl;      // mean of (ratio - 1) - log ratio  (k3 of old vs new)
};
// PPO's clipped surrogate. logp with grad; old_logp and advantages without.
PolicyLoss ppo_policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                           const torch::Tensor& advantages, const torch::Tensor& action_mask, double clip_eps);

struct ValueLoss {
  torch::Tensor loss;           // 0.5 * mean(max((V - R)^2, (clip(V, V_old +- c) - R)^2)); c = 0: no clip
  torch::Tensor clip_fraction;  // share of action tokens where the clipped error is the larger
};
ValueLoss ppo_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                         const torch::Tensor& returns, const torch::Tensor& action_mask, double value_clip);

// GRPO's KL term in the loss: mean over action tokens of the k3 estimator (kl_estimate, so
// clamped to [-10, 10] per token), with grad through logp.
torch::Tensor kl_loss(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& action_mask);

}  // namespace quartet
