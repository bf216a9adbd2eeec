#pragma once
// What one iteration of `train` holds on this rank, filled phase by phase (rl/trainer.hpp):
//   generate    actor ranks: the prompts, the rollouts (whole and per generation chunk) and
//               the actor's own log-probs of them;
//   score       actor ranks: the decoded completions and whatever the scoring groups return
//               (reference log-probs, reward-model scores, critic values), and the text
//               rewards' scores, combined into the total (rl/rewards/reward_terms.hpp);
//               critic ranks: the rollouts they valued and those values, for the critic update;
//   advantages  actor ranks: advantages (and, for PPO, returns, which the critic ranks receive);
//   update      the actor's and the critic's update statistics.
// In colocated placement a rank is all of these at once.
#include <torch/types.h>

#include <array>
#include <string>
#include <vector>

#include "quartet/engine/experience.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/rl/updates.hpp"

namespace quartet {

struct Iteration {
  int index = 0;  // 0-based; the log and the run file count from 1
  int round = 0;  // the generation round (algorithm.dynamic_sampling; 0 otherwise)

  // generate
  std::vector<std::string> prompts, answers;  // one per rollout row
  std::vector<int64_t> rows;                  // each row's prompt: its index in rollout.prompts
  std::vector<std::string> records;           // and that prompt's whole JSONL row ("" for HDF5)
  std::vector<RolloutBatch> chunks;           // as generated, one per rollout.micro_batch prompts
  RolloutBatch batch;                         // the chunks as one batch
  torch::Tensor old_logp;                     // [B, A] the actor's, at sampling time

  // score
  std::vector<std::string> completions;  // decoded, up to the stop token
  torch::Tensor ref_logp;                // [B, A]; undefined without a reference
  torch::Tensor scores;                  // [B] sequence scores: the reward terms' weighted sum, with the overlong penalty if any
  torch::Tensor reward_terms;            // [B, T] float64 each term's scores (reward.terms), else undefined
  torch::Tensor values;                  // [B, A] the critic's; undefined without a critic
  RolloutBatch critic_batch;             // critic ranks: the rollouts they valued
  torch::Tensor critic_values;           // and their values
  torch::Tensor truncated;               // [B] bool: no stop within max_new_tokens (algorithm.overlong_filter)
  torch::Tensor overlong_penalty;        // [B] added to the scores (algorithm.overlong_buffer)

  // advantages
  torch::Tensor kl;          // [B, A] per-token KL estimate; undefined without a reference
  torch::Tensor advantages;  // [B, A]
  torch::Tensor returns;     // [B, A] PPO: on the actor ranks and, sent there, the critic ranks

  // update
  UpdateStats policy, value;
};

}  // namespace quartet
