#include "quartet/rl/algorithm.hpp"

#include "quartet/core/check.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

namespace {

// PPO: KL-shaped token rewards, GAE over the critic's values.
AdvantagesReturns ppo_advantages(const AdvantageInputs& in, const AlgorithmConfig& al) {
  auto rewards = token_rewards(in.scores, in.kl, in.mask, in.kl_coef);
  auto ar = gae(rewards, in.values.to(in.mask.device()).to(torch::kFloat32), in.mask, al.gamma, al.lambda);
  if (al.whiten_advantages) ar.advantages = masked_whiten(ar.advantages, in.mask, in.group);
  return ar;
}

// REINFORCE++: the same token rewards, discounted returns whitened over the actor group.
AdvantagesReturns reinforce_pp_advantages(const AdvantageInputs& in, const AlgorithmConfig& al) {
  auto rewards = token_rewards(in.scores, in.kl, in.mask, in.kl_coef);
  auto returns = discounted_returns(rewards, in.mask, al.gamma);
  return {al.whiten_advantages ? masked_whiten(returns, in.mask, in.group) : returns, {}};
}

// REINFORCE++-baseline (Hu et al. 2025; OpenRLHF's reinforce_baseline): each score less its
// prompt group's mean, then as REINFORCE++ (KL-shaped token rewards, returns, whitening).
AdvantagesReturns reinforce_pp_baseline_advantages(const AdvantageInputs& in, const AlgorithmConfig& al) {
  AdvantageInputs centred = in;
  centred.scores = group_centred(in.scores, al.samples_per_prompt).to(in.scores.device());
  return reinforce_pp_advantages(centred, al);
}

// GRPO: each score against its prompt's group (the KL is a loss term instead).
AdvantagesReturns grpo_advantages_of(const AdvantageInputs& in, const AlgorithmConfig& al) {
  return {grpo_advantages(in.scores, in.mask, al.samples_per_prompt, 1e-6, al.norm_adv_by_std), {}};
}

// RLOO: the sequence's score less its KL penalty, against the mean of the prompt's other samples.
AdvantagesReturns rloo_advantages_of(const AdvantageInputs& in, const AlgorithmConfig& al) {
  auto score = in.kl.defined() ? in.scores - in.kl_coef * in.kl.sum(1) : in.scores;
  return {rloo_advantages(score, in.mask, al.samples_per_prompt), {}};
}

const AlgorithmSpec kAlgorithmTable[] = {
    {Algorithm::ppo, /*trains_critic=*/true, KlUse::reward, ppo_advantages},
    {Algorithm::grpo, false, KlUse::loss, grpo_advantages_of},
    {Algorithm::rloo, false, KlUse::reward, rloo_advantages_of},
    {Algorithm::reinforce_pp, false, KlUse::reward, reinforce_pp_advantages},
    {Algorithm::reinforce_pp_baseline, false, KlUse::reward, reinforce_pp_baseline_advantages},
};

}  // namespace

const AlgorithmSpec& algorithm_spec(Algorithm algorithm) {
  for (const auto& spec : kAlgorithmTable)
    if (spec.algorithm == algorithm) return spec;
  QUARTET_CHECK(false, std::string("algorithm '") + name_of(algorithm) + "' has no row in rl/algorithm.cpp's table");
  return kAlgorithmTable[0];  // not reached
}

}  // namespace quartet
