#pragma once
// The texts the answer checkers compare (math, match, regex, format: docs/rewards.md): the
// prompt row's answer as text, the completion's answer between the deck's tags, whitespace.
#include <optional>
#include <string>
#include <string_view>

#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// The row's answer as text: a string as it is, a number as JSON writes it. A row without one
// (null), or with another JSON type, is a quartet::Error naming the row and `reward`.
std::string answer_text(const RewardSample& sample, const std::string& reward);

// The text between the last `open` in the completion and the first `close` after it; nullopt
// when there is no such pair.
std::optional<std::string> tagged_answer(const std::string& completion, const std::string& open,
                                         const std::string& close);

// Without the ASCII whitespace at either end.
std::string trim_space(std::string_view text);

bool is_space_char(char c);

}  // namespace quartet
