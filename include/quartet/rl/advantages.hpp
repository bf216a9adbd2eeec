#pragma once
// From scores and log-probabilities to advantages and returns, for every algorithm quartet runs.
// Shapes: B sequences, T action positions (the generated tokens; the prompt is not here).
// action_mask [B, T] is 1 for generated tokens up to and including the stop token, 0 after;
// every function ignores masked positions and never reads their values.
//
//   ppo          token rewards = -kl_coef * KL_t on every action token, + the score on the last
//                one; GAE(gamma, lambda) over the critic's values; returns = advantages + values
//   reinforce++  same token rewards, no critic: returns = discounted sums; advantages =
//                returns whitened over the batch (the whole actor group; whiten_advantages)
//   reinforce++-baseline
//                as reinforce++, the score first less the mean of its prompt's group
//   grpo         advantage of every token = (score - mean of its prompt's group) / (std + eps),
//                or without the division (Dr. GRPO, norm_adv_by_std = false); the KL goes into
//                the loss instead (losses.hpp)
//   rloo         advantage = score - mean of the other samples of the same prompt
// Groups: samples_per_prompt consecutive sequences share a prompt.
#include <torch/types.h>

#include <string>

#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {


// Per-token estimate of KL(actor || reference) from the two log-probs of the sampled tokens
// (Schulman, "Approximating KL divergence"): with r = ref_logp - logp,
//   k1 = -r,  k2 = r^2 / 2,  k3 = exp(r) - 1 - r.   Masked positions are 0.
// float32 whatever the inputs' dtype; each token's estimate is clamped to [-10, 10] as OpenRLHF
// does, so one runaway ratio cannot dominate. Differentiable through logp (kl_loss uses it).
torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                          const torch::Tensor& action_mask, KlEstimator estimator);

// Token rewards [B, T]: -kl_coef * kl on every action token, plus scores[b] at the last action
// token of sequence b. kl may be undefined (no reference): then only the scores.
// The last action token is the highest index whose mask is set; a row without one gets nothing.
torch::Tensor token_rewards(const torch::Tensor& scores, const torch::Tensor& kl,
                            const torch::Tensor& action_mask, double kl_coef);

struct AdvantagesReturns {
  torch::Tensor advantages, returns;  // [B, T], 0 at masked positions
};
// GAE: delta_t = r_t + gamma V_{t+1} - V_t (V after the last action token = 0),
// A_t = delta_t + gamma lambda A_{t+1}; returns = A + V. float32, no grad.
// Masked positions are skipped, not stepped through: for 1...1 0...0 masks this is OpenRLHF's
// recursion; inside a hole the next action token is the next step (as verl does).
AdvantagesReturns gae(const torch::Tensor& rewards, const torch::Tensor& values,
                      const torch::Tensor& action_mask, double gamma, double lambda);
// REINFORCE++ returns: G_t = r_t + gamma G_{t+1} within each sequence (holes skipped as in gae).
torch::Tensor discounted_returns(const torch::Tensor& rewards, const torch::Tensor& action_mask, double gamma);
// GRPO: per-sequence (score - group mean) / (group std + eps), std with Bessel's correction off
// (as in DeepSeekMath), spread over the sequence's action tokens -> [B, T]. scale_by_std = false:
// score - group mean (Dr. GRPO, Liu et al. 2025; verl's norm_adv_by_std_in_grpo = false).
torch::Tensor grpo_advantages(const torch::Tensor& scores, const torch::Tensor& action_mask,
                              int samples_per_prompt, double eps = 1e-6, bool scale_by_std = true);
// Each score less the mean of its group (samples_per_prompt consecutive scores) -> [B], float32:
// REINFORCE++-baseline's sequence reward before the KL and the whitening.
torch::Tensor group_centred(const torch::Tensor& scores, int samples_per_prompt);
// RLOO: score_i - mean_{j != i} score_j within each group, over the action tokens -> [B, T].
torch::Tensor rloo_advantages(const torch::Tensor& scores, const torch::Tensor& action_mask,
                              int samples_per_prompt);

// (x - mean) / sqrt(var + eps) over the masked elements; with `group`, mean and variance are
// those of the union of every rank's masked elements (sums all-reduced), so the result equals
// whitening the concatenated batch in one process. shift_mean = false keeps the mean (scales
// only): (x - mean) / sqrt(var + eps) + mean, as trl's whiten. Masked positions come back 0.
// var is the population variance (divided by n, as OpenRLHF's advantage normalisation); sums
// are float64, two passes (mean, then centred squares), each all-reduced over the group.
torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, Collectives* group = nullptr,
                            bool shift_mean = true, double eps = 1e-8);
// Mean of x over mask (optionally over the whole group), a 0-dim tensor of x's float dtype;
// 0 when no element is selected. Keeps x's graph without a group; detached with one.
torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, Collectives* group = nullptr);

// The KL coefficient: fixed, or adaptive (Ziegler et al. 2019): after a batch with KL k over n
// samples, e = clip(k / target - 1, -0.2, 0.2), coef *= 1 + e * n / horizon.
struct KlController {
  bool adaptive = false;
  double coef = 0.05, target = 6.0, horizon = 10000;
  void update(double kl, double samples);
};

}  // namespace quartet
