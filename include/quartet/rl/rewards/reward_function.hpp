#pragma once
// A reward computed from text on the actor's ranks: a built-in rule, an answer checker, the
// user's program or an HTTP endpoint. (A reward *model* scores token ids on its own ranks:
// rl/scoring.hpp.) The deck picks the functions and their weights once; each is logged by name.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace quartet {

// One rollout row as a text reward sees it.
struct RewardSample {
  std::string prompt;       // the prompt text as the actor was given it
  std::string completion;   // decoded up to the stop token, special tokens skipped
  nlohmann::json answer;    // the prompt row's answer (null when it has none)
  nlohmann::json metadata;  // the prompt row's other fields (null when none)
  int64_t row = -1;         // the prompt's row in rollout.prompts, for error messages
};

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  // The name the metrics use: reward.<name> (run.h5's /metrics, where a '/' would make a group).
  virtual std::string name() const = 0;
  // One finite score per sample, in order. A failure is a quartet::Error naming the row (and,
  // for a program, what it printed last); it never hangs.
  virtual std::vector<double> score(const std::vector<RewardSample>& batch) = 0;
};

}  // namespace quartet
