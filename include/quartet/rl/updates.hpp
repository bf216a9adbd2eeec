#pragma once
// The policy and value updates of one iteration: `algorithm.epochs` passes over the rank's
// rollout rows in shuffled minibatches of `algorithm.minibatch` rows, each minibatch one
// optimizer step accumulated over micro-batches of `train.micro_batch` rows. The policy loss is
// aggregated over the whole step (every micro-batch, every actor rank: algorithm.loss_agg_mode),
// so train.micro_batch and the rank count change how it is computed, not what. The number of
// steps and micro-batches is agreed across the model's group (the group's largest row count),
// and a rank short of rows runs empty micro-batches whose loss is multiplied by zero, so the
// sharded collectives line up.
#include <cstdint>

#include "quartet/core/config.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/engine/role_models.hpp"

namespace quartet {

struct PolicyTargets {
  RolloutBatch batch;
  torch::Tensor old_logp, advantages;  // [B, A]
  torch::Tensor ref_logp;              // [B, A], GRPO's KL loss only (else undefined)
  SamplingView view;                   // the distribution old_logp describes
  torch::Tensor loss_mask;             // [B, A]: the tokens the loss counts (undefined = the action mask;
                                       // algorithm.overlong_filter takes truncated rows out)
};

struct UpdateStats {
  double loss = 0, clip_fraction = 0, dual_clip_fraction = 0, approx_kl = 0, entropy = 0, kl_loss = 0, grad_norm = 0,
         lr = 0;
  int steps = 0;
};

// Optimizer steps one iteration takes for `rows` rows per rank (for the learning-rate schedule).
int64_t steps_per_iteration(const Config& config, int64_t rows);

// `step` counts the optimizer's steps over the run (the schedule's position); `total` is the
// run's total. Collective over the role's group.
UpdateStats update_policy(RoleModel& actor, const PolicyTargets& targets, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed);
UpdateStats update_critic(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                          const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                          uint64_t seed);

}  // namespace quartet
