#include "quartet/rl/algorithm_config.hpp"

#include <stdexcept>
#include <string>

namespace quartet {

namespace {

using A = AlgorithmConfig;

constexpr Choice<Algorithm> kAlgorithms[] = {{"ppo", Algorithm::ppo},
                                             {"grpo", Algorithm::grpo},
                                             {"rloo", Algorithm::rloo},
                                             {"reinforce++", Algorithm::reinforce_pp},
                                             {"reinforce++-baseline", Algorithm::reinforce_pp_baseline}};
constexpr Choice<KlEstimator> kKlEstimators[] = {{"k1", KlEstimator::k1}, {"k2", KlEstimator::k2}, {"k3", KlEstimator::k3}};
constexpr Choice<PolicyLossKind> kPolicyLosses[] = {{"ppo", PolicyLossKind::ppo}, {"gspo", PolicyLossKind::gspo}};
constexpr Choice<LossAgg> kLossAggs[] = {{"token-mean", LossAgg::token_mean},
                                         {"seq-mean-token-mean", LossAgg::seq_mean_token_mean},
                                         {"seq-mean-token-sum-norm", LossAgg::seq_mean_token_sum_norm}};
constexpr Choice<KlControl> kKlControllers[] = {{"fixed", KlControl::fixed}, {"adaptive", KlControl::adaptive}};

// algorithm.kl_estimator: "auto" is k1 for the KL in the reward (kl_estimator) and k3 for GRPO's
// KL loss term (finish sets it); k1 | k2 | k3 is both.
KlEstimator parse_kl_estimator(const std::string& text) {
  if (text == "auto") return KlEstimator::k1;
  for (const auto& c : kKlEstimators)
    if (text == c.name) return c.value;
  throw std::invalid_argument("is '" + text + "'; expected one of: auto | " + choice_names(kKlEstimators));
}

const Check<double> kClipRatioC = [](const double& c) {
  return c == 0 || c > 1 ? ""
                         : "must be 0 (off) or > 1: the dual clip bounds the loss of a negative-advantage token at "
                           "clip_ratio_c * |A|, above the ordinary clip's (1 + clip_high) * |A| only when > 1";
};

// What the algorithm's keys say together.
void check_algorithm(const Deck& deck, A& a) {
  if (deck.get<std::string>("algorithm.kl_estimator") != "auto") a.kl_loss_estimator = a.kl_estimator;
  if (a.clip_low == 0) a.clip_low = a.clip_eps;
  if (a.clip_high == 0) a.clip_high = a.clip_eps;
  const bool grouped = a.algorithm == Algorithm::grpo || a.algorithm == Algorithm::rloo ||
                       a.algorithm == Algorithm::reinforce_pp_baseline;
  if (grouped && a.samples_per_prompt < 2)
    deck.fail("algorithm.samples_per_prompt", "must be at least 2 for " + std::string(name_of(a.algorithm)) +
                                                  " (its baseline comes from the other samples of a prompt)");
  if (a.dynamic_sampling && a.samples_per_prompt < 2)
    deck.fail("algorithm.dynamic_sampling", "needs algorithm.samples_per_prompt >= 2 (it drops prompts whose samples all "
                                            "score the same)");
}

}  // namespace

const char* name_of(Algorithm value) { return choice_name(value, kAlgorithms); }
const char* name_of(KlEstimator value) { return choice_name(value, kKlEstimators); }
const char* name_of(KlControl value) { return choice_name(value, kKlControllers); }
const char* name_of(PolicyLossKind value) { return choice_name(value, kPolicyLosses); }
const char* name_of(LossAgg value) { return choice_name(value, kLossAggs); }

const Section<AlgorithmConfig>& algorithm_section() {
  static const Section<A> section("algorithm", "The RL algorithm (train)", {
      choice("name", &A::algorithm, kAlgorithms, ""),
      key("kl_coef", &A::kl_coef, at_least(0.0), "KL penalty coefficient (>= 0; initial value when adaptive)"),
      parsed<A, KlEstimator>("kl_estimator", &A::kl_estimator, "auto", parse_kl_estimator, "auto (k1 for the KL in the reward and the logs, k3 for GRPO's KL loss term) | " + choice_names(kKlEstimators) + " (both)"),
      choice("kl_controller", &A::kl_controller, kKlControllers, ""),
      key("kl_target", &A::kl_target, above(0.0), "adaptive controller: target KL per sequence (> 0)"),
      key("kl_horizon", &A::kl_horizon, above(0.0), "adaptive controller: horizon in samples (> 0)"),
      key("gamma", &A::gamma, within(0.0, 1.0), "discount, in [0, 1]"),
      key("lambda", &A::lambda, within(0.0, 1.0), "GAE lambda, in [0, 1]"),
      key("clip_eps", &A::clip_eps, above(0.0), "PPO ratio clip (> 0): the ratio is clipped to [1 - clip_low, 1 + clip_high], both clip_eps unless given"),
      key("clip_low", &A::clip_low, Check<double>([](const double& v) { return v >= 0 && v < 1 ? "" : "must be in [0, 1) (0 = algorithm.clip_eps)"; }), "lower clip of the ratio, 1 - clip_low (in [0, 1); 0 = clip_eps)"),
      key("clip_high", &A::clip_high, at_least(0.0, "(0 = algorithm.clip_eps)"), "upper clip of the ratio, 1 + clip_high (>= 0; 0 = clip_eps); DAPO's clip-higher: 0.28 against clip_low 0.2"),
      key("clip_ratio_c", &A::clip_ratio_c, kClipRatioC, "dual-clip PPO: a negative-advantage token's loss is at most clip_ratio_c * |A| (0 = off, else > 1; verl's default is 3)"),
      choice("policy_loss", &A::policy_loss, kPolicyLosses, "ppo (a ratio per token) | gspo (GSPO: one length-normalised ratio per sequence, clipped to [1 - clip_low, 1 + clip_high])"),
      choice("loss_agg_mode", &A::loss_agg_mode, kLossAggs, "how the policy loss's per-token terms become one loss per optimizer step: token-mean (over every token of the minibatch, all actor ranks) | seq-mean-token-mean (each sequence's token mean, averaged over sequences) | seq-mean-token-sum-norm (each sequence's token sum / loss_agg_norm, averaged over sequences: Dr. GRPO)"),
      key("loss_agg_norm", &A::loss_agg_norm, at_least(0.0, "(0 = rollout.max_new_tokens)"), "seq-mean-token-sum-norm's constant divisor (>= 0; 0 = rollout.max_new_tokens)"),
      key("norm_adv_by_std", &A::norm_adv_by_std, "grpo: divide each score's distance from its group's mean by the group's std (false: Dr. GRPO)"),
      key("value_clip", &A::value_clip, at_least(0.0), "value clip around the old values (0 = off)"),
      key("value_coef", &A::value_coef, above(0.0), "the critic's loss is multiplied by this (> 0; it has its own optimizer, so this matters through max_grad_norm and adam_eps)"),
      key("entropy_coef", &A::entropy_coef, at_least(0.0), "entropy bonus weight (>= 0); the entropy metric is logged either way"),
      key("epochs", &A::epochs, at_least(1), "passes over each rollout batch (>= 1)"),
      key("minibatch", &A::minibatch, at_least(1), "sequences per optimizer step and rank (>= 1)"),
      key("reward_clip", &A::reward_clip, at_least(0.0), "clip scores to [-c, c] (0 = off)"),
      key("normalize_rewards", &A::normalize_rewards, "divide scores by their running standard deviation"),
      key("whiten_advantages", &A::whiten_advantages, "whiten advantages over the actor group's batch (ppo, reinforce++, reinforce++-baseline)"),
      key("samples_per_prompt", &A::samples_per_prompt, at_least(1), "completions per prompt (>= 1; grpo, rloo and reinforce++-baseline need >= 2)"),
      key("dynamic_sampling", &A::dynamic_sampling, "DAPO's dynamic sampling: drop prompt groups whose samples all score the same and generate more prompts until rollout.batch groups are kept (critic-free algorithms, samples_per_prompt >= 2)"),
      key("dynamic_sampling_max_rounds", &A::dynamic_sampling_max_rounds, at_least(1), "dynamic sampling: generation rounds per iteration at most (>= 1); short of groups after them, the batch is filled with dropped ones"),
      key("overlong_filter", &A::overlong_filter, "truncated samples (no stop token within rollout.max_new_tokens) count nothing in the policy loss"),
      key("overlong_buffer", &A::overlong_buffer, at_least(0, "(0 = no overlong penalty)"), "DAPO's soft overlong penalty: completions longer than rollout.max_new_tokens - overlong_buffer tokens lose overlong_penalty_factor * (length - that) / overlong_buffer of their score (tokens, 0 = off)"),
      key("overlong_penalty_factor", &A::overlong_penalty_factor, at_least(0.0), "the soft overlong penalty at rollout.max_new_tokens tokens (>= 0)"),
  }, check_algorithm);
  return section;
}

}  // namespace quartet
