#include "quartet/rl/rewards/match_answer.hpp"

#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/utf8.hpp"
#include "quartet/rl/rewards/answer_text.hpp"

namespace quartet {

namespace {

char lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

// The part of the completion a matcher reads: the text between the tags (none: nullopt), or
// all of it.
std::optional<std::string> answer_part(const std::string& completion, const RewardConfig& config) {
  if (!config.answer_in_tags) return completion;
  return tagged_answer(completion, config.format_open, config.format_close);
}

}  // namespace

bool answers_match(const std::string& got, const std::string& want, bool strip, bool ignore_case) {
  const std::string a = strip ? trim_space(got) : got, b = strip ? trim_space(want) : want;
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (ignore_case ? lower_ascii(a[i]) != lower_ascii(b[i]) : a[i] != b[i]) return false;
  return true;
}

double ExactMatchReward::score_one(const std::string& completion, const std::string& answer) const {
  const std::optional<std::string> part = answer_part(completion, config_);
  return part && answers_match(*part, answer, config_.match_strip, config_.match_ignore_case) ? 1.0 : 0.0;
}

std::vector<double> ExactMatchReward::score(const std::vector<RewardSample>& batch) {
  std::vector<double> out;
  out.reserve(batch.size());
  for (const RewardSample& s : batch) out.push_back(score_one(s.completion, answer_text(s, name())));
  return out;
}

RegexMatchReward::RegexMatchReward(const RewardConfig& config) : config_(config) {
  if (!config_.regex_pattern.empty()) pattern_ = std::make_unique<Regex>(config_.regex_pattern, "reward.regex_pattern");
}

RegexMatchReward::~RegexMatchReward() = default;

const Regex& RegexMatchReward::answer_pattern(const std::string& answer, int64_t row) {
  auto it = by_answer_.find(answer);
  if (it == by_answer_.end())
    it = by_answer_.emplace(answer, std::make_unique<Regex>(answer, "the answer of row " + std::to_string(row) +
                                                                        " (the regex reward's pattern)")).first;
  return *it->second;
}

double RegexMatchReward::score_one(const std::string& completion, const std::string& answer, int64_t row) {
  const std::optional<std::string> part = answer_part(completion, config_);
  if (!part) return 0.0;
  const std::string text = sanitize_utf8(*part);  // PCRE2 reads UTF-8
  if (!pattern_) {
    const Regex& whole = answer_pattern(answer, row);
    return whole.matches_whole(config_.match_strip ? trim_space(text) : text) ? 1.0 : 0.0;
  }
  const auto matches = pattern_->find_all(text);
  if (matches.empty()) return 0.0;
  const auto groups = pattern_->groups_at(text, matches.back().first);
  if (groups.empty()) return 0.0;
  // The pattern's first capture group when it has one (not taking part: no answer), else the
  // whole match.
  std::pair<size_t, size_t> span = groups[0];
  if (groups.size() > 1 && groups[1].first != std::string::npos) span = groups[1];
  else if (groups.size() > 1) return 0.0;
  const std::string got = text.substr(span.first, span.second - span.first);
  return answers_match(got, answer, config_.match_strip, config_.match_ignore_case) ? 1.0 : 0.0;
}

std::vector<double> RegexMatchReward::score(const std::vector<RewardSample>& batch) {
  std::vector<double> out;
  out.reserve(batch.size());
  for (const RewardSample& s : batch) out.push_back(score_one(s.completion, answer_text(s, name()), s.row));
  return out;
}

}  // namespace quartet
