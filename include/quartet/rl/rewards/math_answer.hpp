#pragma once
// The math answer checker (reward.terms = math): 1 when the completion's final answer equals the
// prompt row's answer, else 0. docs/rewards.md has the rules with examples.
//
// The completion's final answer, the first of these that it holds:
//   GSM8K's "#### N" (the rest of the line after the last ####);
//   the last \boxed{...} (or \fbox{...}), braces nested;
//   the last "answer is ..." or "answer: ..." (any case), up to the end of its sentence or line;
//   its last number (reward.math_last_number; off: no answer, which scores 0).
// A stated answer that is prose ("18 dollars", "$28 \%$. I hope it is correct") is its first
// number. The reference answer: after GSM8K's last ####, else the last \boxed{...}, else the
// whole answer.
//
// Equality, after both are normalised: dollar signs and \$ dropped, $ \( \) \[ \] delimiters,
// \left \right, spacing commands, \displaystyle and spaces dropped; \dfrac \tfrac \cfrac read
// as \frac, \frac12 as \frac{1}{2}; \text{...} \mbox{...} \mathrm{...} units dropped (kept
// when they are the whole answer, "\text{Evelyn}"); degrees (^\circ, °) dropped; a percent
// sign dropped (50\% equals 50, not 0.5); thousands separators (1,000 1{,}000 1\,000)
// dropped; a leading + and trailing periods dropped; of an equation ("x = 5") its last side.
// Two numbers -- integers, decimals (.5, 5.0), fractions 3/4, \frac{3}{4}, -\frac{3}{4},
// \frac{-3}{4}, mixed 1\frac{1}{2} -- are equal when they differ by at most reward.math_tolerance
// times the larger magnitude (at least 1). Tuples and intervals ((1, \frac{1}{2}), [0,1)) are
// equal element by element with the same brackets. Anything else is compared as normalised text
// (\sqrt{2} equals \sqrt2; x^2+1 is not 1+x^2). Decimal commas (3,5 for 3.5) are not read.
#include <optional>
#include <string>
#include <vector>

#include "quartet/rl/rewards/reward_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// The final answer the completion states, as written (not yet normalised); nullopt when it
// states none (and, with last_number, holds no number either).
std::optional<std::string> completion_final_answer(const std::string& completion, bool last_number);

// The part of a reference answer to compare with: GSM8K's "reasoning ... #### 72" gives "72".
std::string reference_final_answer(const std::string& answer);

// The normal form equality works on ("\dfrac{3}{4}\text{ cups}" -> "\frac{3}{4}").
std::string normalize_math_answer(const std::string& answer);

// The value of a normalised answer that is a number (integer, decimal, fraction, \frac, mixed
// number, with a sign); nullopt for anything else.
std::optional<double> math_answer_value(const std::string& normalized);

// Whether two answers (as stated, not normalised) are equal by the rules above.
bool math_answers_equal(const std::string& given, const std::string& reference, double tolerance);

// 1 when the completion's final answer (within the answer tags, with reward.answer_in_tags)
// equals the row's answer, else 0. A row without an answer is a quartet::Error naming it.
class MathAnswerReward : public RewardFunction {
 public:
  explicit MathAnswerReward(const RewardConfig& config) : config_(config) {}
  std::string name() const override { return "math"; }
  std::vector<double> score(const std::vector<RewardSample>& batch) override;
  // One row's score (the tests' entry).
  double score_one(const std::string& completion, const std::string& answer) const;

 private:
  RewardConfig config_;
};

}  // namespace quartet
