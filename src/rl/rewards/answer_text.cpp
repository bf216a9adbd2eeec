#include "quartet/rl/rewards/answer_text.hpp"

#include "quartet/core/check.hpp"

namespace quartet {

bool is_space_char(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim_space(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_space_char(text[begin])) ++begin;
  while (end > begin && is_space_char(text[end - 1])) --end;
  return std::string(text.substr(begin, end - begin));
}

std::string answer_text(const RewardSample& sample, const std::string& reward) {
  const nlohmann::json& a = sample.answer;
  if (a.is_string()) return a.get<std::string>();
  if (a.is_number()) return a.dump();
  const std::string prompt = sample.prompt.size() > 80 ? sample.prompt.substr(0, 77) + "..." : sample.prompt;
  if (a.is_null())
    fail(__FILE__, __LINE__, "the " + reward + " reward grades against the prompt row's \"answer\", and row " +
                                 std::to_string(sample.row) + " (prompt \"" + prompt + "\") has none");
  fail(__FILE__, __LINE__, "the " + reward + " reward needs a string or number \"answer\"; row " +
                               std::to_string(sample.row) + " (prompt \"" + prompt + "\") has " + a.type_name());
}

std::optional<std::string> tagged_answer(const std::string& completion, const std::string& open,
                                         const std::string& close) {
  const size_t at = completion.rfind(open);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + open.size();
  const size_t to = completion.find(close, from);
  if (to == std::string::npos) return std::nullopt;
  return completion.substr(from, to - from);
}

}  // namespace quartet
