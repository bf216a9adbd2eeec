#pragma once
// What each algorithm of `train` is made of, in one table (algorithm.cpp): whether it trains a
// critic, where the KL to the reference goes, and how its advantages are estimated from the
// iteration's scores. The deck's algorithm.name picks a row once, when the deck is loaded.
//
// To add an advantage estimator: write it as an AdvantageEstimator in algorithm.cpp and give it
// a row of kAlgorithmTable there (with its Algorithm value and deck name in core/config.hpp). To
// add a policy loss term: rl/updates.cpp's policy_micro_batch, the one place the loss is formed.
#include <torch/types.h>

#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

// One actor rank's share of the iteration, as an estimator sees it.
struct AdvantageInputs {
  torch::Tensor scores;  // [B] sequence scores after normalisation and clipping, float32
  torch::Tensor kl;      // [B, T] per-token KL estimate; undefined without a reference model
  torch::Tensor values;  // [B, T] the critic's values; PPO only
  torch::Tensor mask;    // [B, T] action mask, float32
  double kl_coef = 0;    // the KL controller's coefficient this iteration
  Collectives* group = nullptr;  // the actor group: whitening spans every rank's rows
};

// returns: what the critic learns from (PPO), else undefined.
using AdvantageEstimator = AdvantagesReturns (*)(const AdvantageInputs& in, const AlgorithmConfig& config);

enum class KlUse {
  reward,  // -kl_coef * KL shapes the token rewards (PPO, REINFORCE++) or the sequence score (RLOO)
  loss,    // kl_coef * KL(actor || reference) is a term of the policy loss (GRPO)
};

struct AlgorithmSpec {
  Algorithm algorithm;
  bool trains_critic;
  KlUse kl;
  AdvantageEstimator advantages;
};

const AlgorithmSpec& algorithm_spec(Algorithm algorithm);

}  // namespace quartet
