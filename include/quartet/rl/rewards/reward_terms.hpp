#pragma once
// The run's reward as terms (docs/rewards.md): [reward] terms and weights, or model.reward.kind
// alone. A term is the reward model's score (scored on its own ranks: rl/scoring.hpp) or a text
// reward (rl/rewards/reward_function.hpp) scored here, on the actor ranks: a built-in one, or the user's
// code (command:, http: rl/rewards/user_code_rewards.hpp). The total each rollout row
// gets is the weighted sum of its terms' scores; with reward.terms each term is logged as
// reward.<name> (its mean, before its weight).
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "quartet/core/config.hpp"
#include "quartet/core/reward_kind.hpp"
#include "quartet/rl/iteration.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// The text reward of one kind (core/reward_kind.hpp, parsed when the deck was read): rule:<task>,
// math, match, regex, format, command:<command line>, http://... A setting of its kind that
// cannot work (a task no rule has, a pattern that does not compile) is a DeckError naming `key`.
// A user-code kind starts its program or reaches its endpoint (a quartet::Error when it cannot).
std::unique_ptr<RewardFunction> make_reward_function(const RewardKind& kind, const Config& config,
                                                     const std::string& key);

class RewardTerms {
 public:
  // Builds every built-in text reward and checks the user-code kinds' spelling (on each rank,
  // before any model: a bad term stops the run there).
  explicit RewardTerms(const Config& config);
  // One text reward of `kind` alone (eval.reward), named in errors by `key`.
  RewardTerms(const Config& config, const RewardKind& kind, const std::string& key);

  // Actor ranks, once the deck is known to run: starts each command: term's program and reaches
  // each http: term's endpoint (a quartet::Error naming it when it does not answer).
  void start_user_code(const RewardCallConfig& call);

  // The names logged per term (reward.terms given), else none: a lone reward is the total.
  const std::vector<std::string>& logged_names() const { return logged_; }

  // Actor ranks, after the score phase's exchanges: it.scores (the reward model's, when it is a
  // term) becomes the total and, with reward.terms, it.reward_terms holds each term's scores.
  // A text reward's missing or non-finite score is a quartet::Error naming the term and row.
  void score(Iteration& it);

  struct Totals {
    torch::Tensor total;  // [B] float32: the weighted sum (the reward model's scores as they come when it is the only reward)
    torch::Tensor terms;  // [B, T] float64: each term's scores, with reward.terms; else undefined
  };
  // The same for any rows (the evaluation's): `model_scores` the reward model's scores of them
  // (undefined without a reward model).
  Totals totals(const std::vector<RewardSample>& samples, const torch::Tensor& model_scores);

 private:
  struct Term {
    std::string name;
    double weight = 1;
    RewardKind kind;
    std::unique_ptr<RewardFunction> function;  // null: the reward model's score (or user code not started yet)
  };
  static Term make_term(const RewardKind& kind, double weight, const Config& config, const std::string& key);
  std::vector<Term> terms_;
  std::vector<std::string> logged_;
  std::string prompt_field_;
};

}  // namespace quartet
