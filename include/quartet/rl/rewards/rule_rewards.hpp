#pragma once
// Verifiable tasks with exact checkers: the reward without a reward model, for the CPU demo and
// the learning tests. A task makes its own prompts (seeded) and scores completions. Scores are
// in [0, 1] with partial credit so that a policy starting from random weights gets a signal:
//   sort_digits  prompt "sort 3817=" -> answer "1378"
//   add          prompt "add 27+58=" -> answer "85"
// The completion is the text before the first stop (EOS or newline). The exact answer scores 1,
// an empty completion 0, anything else (L = the longer of answer and completion)
//   0.6 * (characters equal position by position) / L
// + 0.25 * (characters in common, as multisets) / L
// + 0.15 * (digits in the completion) / (its length)          < 1.
// The last two terms give a policy that starts from random characters a gradient towards the
// right alphabet and the right characters before it finds their order.
//
// Prompts are read strictly, as make_prompts writes them: sort_digits takes 3 to 6 digits
// (leading zeros are digits like any other: "sort 900=" -> "009"); add takes operands 0 to 99
// without sign or leading zeros. Draws use mt19937_64 and a written-out bounded draw (not
// std::uniform_int_distribution, whose algorithm varies by library), so the prompts, and the
// shipped inputs/prompts/sort_digits.jsonl (512, seed 1) and add.jsonl (512, seed 2), are the
// same on every platform; tests/unit/test_rl_data.cpp checks the files against make_prompts.
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
  // `count` prompts, deterministic in seed (for inputs/prompts/*.jsonl and the tests); a longer
  // list begins with the shorter one of the same seed. Duplicates may occur.
  virtual std::vector<std::string> make_prompts(int count, uint64_t seed) const = 0;
};

// "sort_digits" | "add" (the part after rule: in model.reward.kind); unknown names are a
// quartet::Error listing the known ones.
std::unique_ptr<RuleReward> make_rule_reward(const std::string& task);

}  // namespace quartet
