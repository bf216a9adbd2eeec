#pragma once
// The losses of the policy and value updates over action tokens. Shapes [B, T] as in
// advantages.hpp; every statistic returned is a detached scalar for the logs. The policy loss's
// per-token terms are aggregated as algorithm.loss_agg_mode says (aggregate_loss); the value
// loss is each micro-batch's mean over its action tokens, as OpenRLHF does.
#include <torch/types.h>

#include "quartet/core/config.hpp"
#include "quartet/engine/token_logprobs.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

// How per-token terms x [B, T] become one loss (algorithm.loss_agg_mode; verl's names):
//   token-mean               sum_{b,t} x_bt / N_tokens
//   seq-mean-token-mean      sum_b (sum_t x_bt / n_b) / N_seqs
//   seq-mean-token-sum-norm  sum_b (sum_t x_bt / C) / N_seqs          (Dr. GRPO; C = norm)
// sums over the masked tokens, n_b the tokens of row b, N_seqs the rows with at least one.
// N_tokens and N_seqs are those of the whole optimizer step, which may span several
// micro-batches and ranks: `denominator` gives them (rl/updates.cpp folds the micro-batch count
// and the group's averaging of gradients into it). Undefined: this call's own rows are the step.
struct LossAggregation {
  LossAgg mode = LossAgg::token_mean;
  double norm = 1.0;          // C of seq-mean-token-sum-norm
  torch::Tensor denominator;  // 0-dim float32 N_tokens (token-mean) or N_seqs (the others)
};
torch::Tensor aggregate_loss(const torch::Tensor& x, const torch::Tensor& action_mask, const LossAggregation& agg);
// What `denominator` counts in row b of a step: its tokens (token-mean) or 1 if it has any.
torch::Tensor aggregation_weights(const torch::Tensor& action_mask, LossAgg mode);

// The policy's surrogate. ratio r = pi / pi_old per token (ppo), or GSPO's sequence ratio
// s_b = exp(mean_t log(pi / pi_old)) given to every token of row b, with the gradient of
// s_b * log pi_t per token (GSPO-token: log r_bt = sg(log s_b) + log pi_bt - sg(log pi_bt)). Then
//   x_bt = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)
// and, with dual clip (clip_ratio_c > 0), where A < 0: x_bt = min(x_bt, -clip_ratio_c A).
struct PolicyLossOptions {
  PolicyLossKind kind = PolicyLossKind::ppo;
  double clip_low = 0.2, clip_high = 0.2;
  double clip_ratio_c = 0;  // 0 = no dual clip
};
struct PolicyLoss {
  torch::Tensor loss;               // with grad: aggregate_loss of x
  torch::Tensor clip_fraction;      // share of action tokens whose ratio was clipped: where the clipped
                                    // term is the one the min takes (OpenRLHF, trl, verl)
  torch::Tensor dual_clip_fraction; // share of action tokens where the dual clip's bound is the loss
  torch::Tensor approx_kl;          // mean of (ratio - 1) - log ratio of the token ratios (k3 of old vs new)
};
// logp with grad; old_logp and advantages without. The statistics are this call's token means.
PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                       const torch::Tensor& action_mask, const PolicyLossOptions& options,
                       const LossAggregation& aggregation = {});
// PPO's symmetric clipped surrogate, a token mean over these rows: policy_loss with
// clip_low = clip_high = clip_eps.
PolicyLoss ppo_policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                           const torch::Tensor& advantages, const torch::Tensor& action_mask, double clip_eps);

struct ValueLoss {
  torch::Tensor loss;           // 0.5 * mean(max((V - R)^2, (clip(V, V_old +- c) - R)^2)); c = 0: no clip
  torch::Tensor clip_fraction;  // share of action tokens where the clipped error is the larger
};
ValueLoss ppo_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                         const torch::Tensor& returns, const torch::Tensor& action_mask, double value_clip);

// GRPO's KL term in the loss: the estimator's per-token KL(actor || reference) (kl_estimate, so
// clamped to [-10, 10] per token), aggregated as the policy loss is, with grad through logp.
// DeepSeekMath's GRPO uses k3 (the default, algorithm.kl_estimator = auto).
torch::Tensor kl_loss(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& action_mask,
                      KlEstimator estimator = KlEstimator::k3, const LossAggregation& aggregation = {});

}  // namespace quartet
