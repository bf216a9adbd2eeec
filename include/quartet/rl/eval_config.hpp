#pragma once
// The deck's [eval] section: the policy measured on held-out prompts while it trains
// (rl/evaluator.hpp): greedy pass@1, and with samples > 0 the n-sample pass@1 and pass@k, the mean
// reward and length, through the run's reward. Off while prompts is "".
#include <optional>
#include <string>
#include <vector>

#include "quartet/core/reward_kind.hpp"
#include "quartet/core/settings.hpp"

namespace quartet {

struct EvalConfig {             // [eval]
  std::string prompts;          // held-out prompts file, in any format rollout.prompts reads
  std::string prompt_field;     // plain JSONL field with the prompt text ("" = rollout.prompt_field)
  int every = 0;                // every N iterations (0 = only at the end)
  bool at_start = false;        // also before the first iteration (the series' point 0)
  bool at_end = true;           // after the last iteration
  int count = 0;                // the first N prompts of the file (0 = all)
  int samples = 0;              // completions per prompt for pass@k (0 = greedy only)
  std::vector<int> k;           // pass@k for each (1 <= k <= samples); pass@1 is always reported
  double temperature = 1.0;     // the n-sample part's sampling temperature (> 0)
  int max_new_tokens = 0;       // 0 = rollout.max_new_tokens (and at most that)
  double pass_threshold = 1.0;  // a completion passes when its reward is at least this
  // The reward that grades the evaluation: none = the run's own (reward.terms or model.reward.kind);
  // else one text reward (core/reward_kind.hpp), e.g. match for exact-match accuracy while the
  // policy trains against a learnt reward model.
  std::optional<RewardKind> reward;
  bool enabled() const { return !prompts.empty(); }
};

const Section<EvalConfig>& eval_section();

}  // namespace quartet
