#pragma once
// The deck's [reward] section: several rewards at once, each a term with a weight, and the
// settings of the answer-checking kinds (rl/rewards/reward_terms.hpp builds them; docs/rewards.md).
//   [reward]
//   terms = model, math, format     # the total is the weighted sum of the terms' scores
//   weights = 1.0, 1.0, 0.2
// Without reward.terms the reward is model.reward.kind alone, as before the section existed.
// Recorded in run.h5 with the rest of the resolved deck.
#include <string>
#include <vector>

#include "quartet/core/reward_kind.hpp"
#include "quartet/core/settings.hpp"

namespace quartet {

struct RewardConfig {  // [reward]
  // The terms in the deck's order, each a reward kind (core/reward_kind.hpp). Empty:
  // model.reward.kind alone (no per-term metrics).
  std::vector<RewardKind> terms;
  std::vector<double> weights;  // one per term; all 1 when the deck gives none
  // math, match, regex: the completion's answer is the text between the last format_open and
  // the format_close after it (none: the answer is wrong) instead of the whole completion.
  bool answer_in_tags = false;
  bool math_last_number = true;  // math: with no explicit final answer, the completion's last number
  double math_tolerance = 1e-9;  // math: relative tolerance of numerical equality
  bool match_strip = true;         // match, regex: surrounding whitespace ignored
  bool match_ignore_case = false;  // match, regex: letters compared without case
  // regex: the completion's answer is this pattern's first capture group (else its whole match)
  // at the pattern's last match, compared with the answer as match compares; "" = the prompt
  // row's answer is itself the pattern, which the whole (stripped) completion must match.
  std::string regex_pattern;
  std::string format_open = "<answer>", format_close = "</answer>";  // format: the answer tags
  std::string format_regex;  // format: "" = the tags; else the whole completion must match this
};

const Section<RewardConfig>& reward_section();

// Whether the run has a reward model to score with: model.reward.kind = model without
// reward.terms, or a model term among reward.terms.
bool uses_reward_model(const Config& config);

}  // namespace quartet
