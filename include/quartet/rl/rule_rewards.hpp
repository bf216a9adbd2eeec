#pragma once
// Verifiable tasks with exact checkers: the reward without a reward model, for the CPU demo and
// the learning tests. A task makes its own prompts (seeded) and scores completions. Scores are
// in [0, 1] with partial credit so that a policy starting from random weights gets a signal:
//   sort_digits  prompt "sort 3817=" -> answer "1378"
//   add          prompt "add 27+58=" -> answer "85"
// score = (characters of the answer matched position by position) / max(answer length,
// completion length), where the completion is the text before the first stop (EOS or newline);
// 1 only for the exact answer.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace quartet {

class RuleReward {
 public:
  virtual ~RuleReward() = default;
  virtual std::string name() const = 0;
  // The answer for a prompt of this task; throws quartet::Error naming the prompt if it is not one.
  virtual std::string answer(const std::string& prompt) const = 0;
  double score(const std::string& prompt, const std::string& completion) const;
  // `count` prompts, deterministic in seed (for inputs/prompts/*.jsonl and the tests).
  virtual std::vector<std::string> make_prompts(int count, uint64_t seed) const = 0;
};

// "sort_digits" | "add" (the part after rule: in model.reward.kind); unknown names are a
// quartet::Error listing the known ones.
std::unique_ptr<RuleReward> make_rule_reward(const std::string& task);

}  // namespace quartet
