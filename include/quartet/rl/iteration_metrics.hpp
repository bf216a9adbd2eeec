#pragma once
// One iteration's numbers over the whole world: what the log line prints and run.h5's
// /metrics stores. Each rank adds what it owns (the actor ranks the scores and the KL, the
// actor's and the critic's first rank their update statistics, every rank its phase times);
// reduce() makes them the world's.
#include <mpi.h>

#include <array>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/iteration.hpp"

namespace quartet {

struct IterationMetrics {
  // Summed over the world.
  double score_sum = 0, score_sq_sum = 0, score_count = 0, kl_sum = 0, length_sum = 0;
  // Added by one rank only, so that the sum is its value.
  double policy_loss = 0, clip_fraction = 0, approx_kl = 0, entropy = 0, kl_loss = 0;
  double value_loss = 0, value_clip_fraction = 0, grad_norm_actor = 0, grad_norm_critic = 0;
  double kl_coef = 0, lr = 0;
  // The recipe options' numbers, in the log line and run.h5 only where the option is on (the
  // trainer sets show_*). Summed over the world, except dual_clip_fraction and sampling_rounds
  // (added by one rank).
  double dual_clip_fraction = 0, truncated = 0, overlong_penalty = 0, groups_drawn = 0, groups_dropped = 0,
         groups_filled = 0, drawn_score_sum = 0, drawn_count = 0, sampling_rounds = 0;
  bool show_dual_clip = false, show_overlong = false, show_dynamic_sampling = false;
  // Lowest and highest score over the actor ranks.
  double score_min = std::numeric_limits<double>::infinity();
  double score_max = -std::numeric_limits<double>::infinity();
  // The slowest rank's.
  std::array<double, kPhases> phase_seconds{};
  double iteration_seconds = 0;
  // Generation proper within the generate phase (RolloutGenerator::decode_seconds) and its
  // forward passes (the prompt's and each decoding step): the slowest actor rank's.
  double decode_seconds = 0, decode_steps = 0;
  // Each reward term's raw scores summed over the world's rows (reward.terms; the names, and
  // so the count, alike on every rank).
  std::vector<std::string> reward_term_names;
  std::vector<double> reward_term_sums;

  // Actor ranks: the raw scores [B], the action mask [B, A] and the per-token KL (may be undefined).
  void add_rollouts(const torch::Tensor& scores, const torch::Tensor& mask, const torch::Tensor& kl);
  // Every rank: the reward terms logged (rl/rewards/reward_terms.hpp), before any is added.
  void name_reward_terms(const std::vector<std::string>& names);
  // Actor ranks: each term's scores [B, T].
  void add_reward_terms(const torch::Tensor& terms);
  // The actor group's first rank: the policy update and the KL coefficient it ran with.
  void add_policy(const UpdateStats& s, double kl_coefficient);
  // The critic group's first rank.
  void add_value(const UpdateStats& s);

  // Collective over the world.
  void reduce(MPI_Comm world);

  double reward_mean() const;
  double reward_std() const;
  double kl_per_sequence() const;
  double response_length() const;
  double tokens_per_second() const;

  // "iter  25/200 | reward 0.187 ±0.086 [0.00, 0.43] | kl 10.1310 (coef 0.010) | ..."; with
  // reward.terms, each term's mean after the range: "[0.00, 1.20] (math 0.406 format 0.970)"
  std::string log_line(int iteration, int iterations, const AlgorithmSpec& algorithm, double eta_seconds) const;
  // name -> value, as run.h5's /metrics has them; reward.<term> is a term's mean raw score.
  std::map<std::string, double> named(const AlgorithmSpec& algorithm) const;
};

}  // namespace quartet
