#pragma once
// The deck's [algorithm] section: the RL algorithm of `quartet train` and its coefficients
// (rl/algorithm.hpp says what each algorithm is made of).
#include "quartet/core/settings.hpp"

namespace quartet {

// The algorithms of `train` (rl/algorithm.hpp says what each is made of).
enum class Algorithm { ppo, grpo, rloo, reinforce_pp, reinforce_pp_baseline };
// Schulman's estimators of KL(actor || reference) per token (rl/advantages.hpp).
enum class KlEstimator { k1, k2, k3 };
enum class KlControl { fixed, adaptive };  // adaptive: Ziegler et al. 2019
// The policy's surrogate (rl/losses.hpp): PPO's per-token ratio, or GSPO's per-sequence one.
enum class PolicyLossKind { ppo, gspo };
// How the per-token terms of the policy loss become one number (rl/losses.hpp), as verl's
// loss_agg_mode names them.
enum class LossAgg { token_mean, seq_mean_token_mean, seq_mean_token_sum_norm };
// The deck's spelling of each value: "ppo", "reinforce++", "k3", "adaptive", "token-mean".
const char* name_of(Algorithm value);
const char* name_of(KlEstimator value);
const char* name_of(KlControl value);
const char* name_of(PolicyLossKind value);
const char* name_of(LossAgg value);

struct AlgorithmConfig {        // [algorithm]
  Algorithm algorithm = Algorithm::ppo;  // algorithm.name
  double kl_coef = 0.05;        // initial KL penalty coefficient (beta)
  // algorithm.kl_estimator: the KL in the reward and in the logs (kl_estimator), and GRPO's KL
  // loss term (kl_loss_estimator). The deck's "auto" (the default) is k1 for the first and k3
  // for the second, each what OpenRLHF and verl use there; k1 | k2 | k3 sets both.
  KlEstimator kl_estimator = KlEstimator::k1;
  KlEstimator kl_loss_estimator = KlEstimator::k3;
  KlControl kl_controller = KlControl::fixed;
  double kl_target = 6.0;       // adaptive: target KL per sequence
  double kl_horizon = 10000;    // adaptive: samples over which the coefficient adapts
  double gamma = 1.0, lambda = 0.95;  // GAE discount and lambda (ppo), discount (reinforce++)
  double clip_eps = 0.2;        // PPO policy ratio clip
  // The ratio's clip range [1 - clip_low, 1 + clip_high]; 0 = clip_eps, which loading the deck
  // puts in its place. DAPO's clip-higher: clip_high > clip_low.
  double clip_low = 0, clip_high = 0;
  double clip_ratio_c = 0;      // dual-clip PPO: negative-advantage tokens' loss capped at c |A| (0 = off; > 1)
  PolicyLossKind policy_loss = PolicyLossKind::ppo;
  LossAgg loss_agg_mode = LossAgg::token_mean;
  double loss_agg_norm = 0;     // seq-mean-token-sum-norm's constant (0 = rollout.max_new_tokens)
  bool norm_adv_by_std = true;  // grpo: divide by the group's std (false: Dr. GRPO)
  double value_clip = 0.2;      // PPO value clip (0 = off)
  double value_coef = 1.0;      // the critic's loss is multiplied by this (the critic has its own optimizer)
  double entropy_coef = 0.0;    // entropy bonus (the entropy metric is computed either way)
  int epochs = 1;               // passes over each rollout batch
  int minibatch = 8;            // sequences per optimizer step and rank
  double reward_clip = 10.0;    // scores clipped to [-c, c] after normalisation (0 = off)
  bool normalize_rewards = false;  // scores divided by a running std (and centred)
  bool whiten_advantages = true;   // advantages whitened over the actor group's batch (ppo, reinforce++, reinforce++-baseline)
  int samples_per_prompt = 1;   // completions per prompt (grpo, rloo and reinforce++-baseline need >= 2)
  // DAPO's dynamic sampling: prompt groups whose samples all score the same are dropped and more
  // prompts are generated until rollout.batch groups are kept, in at most this many rounds.
  bool dynamic_sampling = false;
  int dynamic_sampling_max_rounds = 10;
  // Truncated samples (no stop token within rollout.max_new_tokens) count nothing in the loss.
  bool overlong_filter = false;
  // DAPO's soft overlong penalty: a completion longer than rollout.max_new_tokens - buffer
  // loses factor * (length - that) / buffer of its score (0 = off).
  int overlong_buffer = 0;
  double overlong_penalty_factor = 1.0;
};

const Section<AlgorithmConfig>& algorithm_section();

}  // namespace quartet
