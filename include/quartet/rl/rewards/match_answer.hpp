#pragma once
// Answer matching (docs/rewards.md): 1 when the completion's answer is the prompt row's answer,
// else 0.
//   match  the whole completion (or, with reward.answer_in_tags, the text between the tags)
//          equals the answer; reward.match_strip ignores whitespace at either end,
//          reward.match_ignore_case the case of ASCII letters.
//   regex  with reward.regex_pattern: the pattern's first capture group (else its whole match),
//          at its last match in the completion, equals the answer as match compares them;
//          without: the row's answer is a PCRE2 pattern that the whole completion (stripped with
//          reward.match_strip) must match. A row's pattern that does not compile is an error
//          naming the row.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quartet/rl/rewards/reward_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

class Regex;

// Whether `got` is `want` under match's options.
bool answers_match(const std::string& got, const std::string& want, bool strip, bool ignore_case);

class ExactMatchReward : public RewardFunction {
 public:
  explicit ExactMatchReward(const RewardConfig& config) : config_(config) {}
  std::string name() const override { return "match"; }
  std::vector<double> score(const std::vector<RewardSample>& batch) override;
  double score_one(const std::string& completion, const std::string& answer) const;

 private:
  RewardConfig config_;
};

class RegexMatchReward : public RewardFunction {
 public:
  // A reward.regex_pattern that does not compile is a quartet::Error naming the key.
  explicit RegexMatchReward(const RewardConfig& config);
  ~RegexMatchReward() override;
  std::string name() const override { return "regex"; }
  std::vector<double> score(const std::vector<RewardSample>& batch) override;
  // `row` names the row in the error of an answer pattern that does not compile.
  double score_one(const std::string& completion, const std::string& answer, int64_t row = -1);

 private:
  const Regex& answer_pattern(const std::string& answer, int64_t row);
  RewardConfig config_;
  std::unique_ptr<Regex> pattern_;                          // reward.regex_pattern's
  std::map<std::string, std::unique_ptr<Regex>> by_answer_;  // the rows' own patterns, compiled once
};

}  // namespace quartet
