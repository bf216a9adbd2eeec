#pragma once
// The format reward (reward.terms = format; docs/rewards.md): 1 when the completion is shaped as
// the deck asks, else 0. Without reward.format_regex: the completion holds reward.format_open
// once, then reward.format_close once, with some non-blank text between them (e.g.
// "<answer>72</answer>"); with it: the whole completion matches that PCRE2 pattern (add (?s) to
// let . cross lines). Answers are not read: a format term rewards the shape alone.
#include <memory>
#include <string>
#include <vector>

#include "quartet/rl/rewards/reward_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

class Regex;

class FormatReward : public RewardFunction {
 public:
  // A reward.format_regex that does not compile is a quartet::Error naming the key.
  explicit FormatReward(const RewardConfig& config);
  ~FormatReward() override;
  std::string name() const override { return "format"; }
  std::vector<double> score(const std::vector<RewardSample>& batch) override;
  double score_one(const std::string& completion) const;

 private:
  RewardConfig config_;
  std::unique_ptr<Regex> pattern_;
};

}  // namespace quartet
