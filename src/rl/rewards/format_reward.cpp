#include "quartet/rl/rewards/format_reward.hpp"

#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/utf8.hpp"
#include "quartet/rl/rewards/answer_text.hpp"

namespace quartet {

namespace {

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

}  // namespace

FormatReward::FormatReward(const RewardConfig& config) : config_(config) {
  if (!config_.format_regex.empty()) pattern_ = std::make_unique<Regex>(config_.format_regex, "reward.format_regex");
}

FormatReward::~FormatReward() = default;

double FormatReward::score_one(const std::string& completion) const {
  if (pattern_) return pattern_->matches_whole(sanitize_utf8(completion)) ? 1.0 : 0.0;
  const std::string& open = config_.format_open;
  const std::string& close = config_.format_close;
  if (open == close ? occurrences(completion, open) != 2
                    : occurrences(completion, open) != 1 || occurrences(completion, close) != 1)
    return 0.0;
  const size_t from = completion.find(open) + open.size();
  const size_t to = completion.find(close, from);
  if (to == std::string::npos) return 0.0;  // the closing tag comes first
  return trim_space(std::string_view(completion).substr(from, to - from)).empty() ? 0.0 : 1.0;
}

std::vector<double> FormatReward::score(const std::vector<RewardSample>& batch) {
  std::vector<double> out;
  out.reserve(batch.size());
  for (const RewardSample& s : batch) out.push_back(score_one(s.completion));
  return out;
}

}  // namespace quartet
