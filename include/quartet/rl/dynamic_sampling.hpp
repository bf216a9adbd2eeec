#pragma once
// DAPO's dynamic sampling (Yu et al. 2025; verl's filter_groups, OpenRLHF's dynamic_filtering):
// a prompt group whose samples all score the same has advantage 0 for every sample under a
// group baseline, so it teaches nothing and only dilutes the batch. Such groups are dropped and
// more prompts are generated, a round of rollout.batch prompts at a time, until rollout.batch
// groups are kept or algorithm.dynamic_sampling_max_rounds rounds have run. Short after the last
// round (verl stops the run there), the batch is filled up with dropped groups, so that every
// iteration trains on the same number of rows; the log says how many were drawn, dropped and
// used to fill.
//
// The rounds' decision is the world's (every scoring group must take part in every round);
// this class keeps an actor rank's share.
#include <torch/types.h>

#include <vector>

#include "quartet/rl/iteration.hpp"

namespace quartet {

// bool [G]: the groups (samples_per_prompt consecutive scores each) whose scores are not all equal.
torch::Tensor informative_groups(const torch::Tensor& scores, int samples_per_prompt);

// The rows `rows` (int64, ascending or not) of an iteration's actor-side rollouts: prompts,
// answers, completions, the batch, old and reference log-probs, scores, truncation and overlong
// penalty (whichever are defined). The result is one chunk.
Iteration select_iteration_rows(const Iteration& it, const torch::Tensor& rows);
// Iterations' actor-side rollouts one after the other, as one chunk (concat_rollouts' padding).
Iteration concat_iterations(const std::vector<Iteration>& parts, int64_t pad_id, int64_t max_width);

class DynamicBatch {
 public:
  // wanted: groups per actor rank and iteration (rollout.batch).
  DynamicBatch(int samples_per_prompt, int wanted, int64_t pad_id, int64_t max_width);

  // A round's rollouts on this actor rank (scores final, the overlong penalty included): its
  // informative groups are kept, up to the wanted count; the others are remembered. Returns
  // whether the batch is full.
  bool add(Iteration round);
  // The kept groups as one iteration (index and round of the last round), filled up with
  // dropped groups (in the order drawn) when short.
  Iteration take();

  int64_t groups_drawn() const { return drawn_; }
  int64_t groups_dropped() const { return dropped_; }
  int64_t groups_filled() const { return filled_; }  // dropped groups that filled a short batch
  double drawn_score_sum() const { return score_sum_; }  // over every sample drawn
  int64_t drawn_samples() const { return drawn_ * samples_; }

 private:
  int samples_, wanted_;
  int64_t pad_id_, max_width_;
  std::vector<Iteration> rounds_;
  std::vector<std::vector<int64_t>> kept_, dropped_groups_;  // per round, group indices
  int64_t kept_count_ = 0, drawn_ = 0, dropped_ = 0, filled_ = 0;
  double score_sum_ = 0;
};

}  // namespace quartet
