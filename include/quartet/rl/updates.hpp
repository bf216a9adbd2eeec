#pragma once
// The policy and value updates of one iteration: `algorithm.epochs` passes over the rank's
// rollout rows in shuffled minibatches of `algorithm.minibatch` rows, each minibatch one
// optimizer step accumulated over micro-batches of `train.micro_batch` rows. The number of
// steps and micro-batches is agreed across the model's group (the group's largest row count),
// and a rank short of rows runs empty micro-batches whose loss is multiplied by zero, so the
// sharded collectives line up.
#include <cstdint>
#include <memory>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/side_stream.hpp"
#include "quartet/rl/experience.hpp"
#include "quartet/rl/role_models.hpp"

namespace quartet {

struct PolicyTargets {
  RolloutBatch batch;
  torch::Tensor old_logp, advantages;  // [B, A]
  torch::Tensor ref_logp;              // [B, A], GRPO's KL loss only (else undefined)
  SamplingView view;                   // the distribution old_logp describes
};

struct UpdateStats {
  double loss = 0, clip_fraction = 0, approx_kl = 0, entropy = 0, kl_loss = 0, grad_norm = 0, lr = 0;
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

// One model's updates of an iteration, an optimizer step at a time, so that two models on one
// rank can take turns (run_in_turns). Defined in updates.cpp.
class Updates;
struct UpdatesDeleter {
  void operator()(Updates* u) const;
};
using UpdatesPtr = std::unique_ptr<Updates, UpdatesDeleter>;

// The updates of update_policy and update_critic, not yet run. They read `config` and the
// models while they run; the targets are copied (to the model's device).
UpdatesPtr policy_updates(RoleModel& actor, const PolicyTargets& targets, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed);
UpdatesPtr value_updates(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                         const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                         uint64_t seed);

// Runs every model's updates to the end, taking turns a step each (A's first step, B's first,
// A's second, ...), and returns their statistics in the same order. With `side` (an active
// SideStream on the models' GPU), each optimizer step is queued on it, so that one model's step
// runs while the next model computes; a model's next step waits for its last one on the device.
// Each model computes exactly what it would alone. Collective over each model's group: every
// rank of a group must run the same models in the same order.
std::vector<UpdateStats> run_in_turns(const std::vector<Updates*>& updates, SideStream* side);

}  // namespace quartet
