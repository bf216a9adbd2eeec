#include "quartet/rl/rewards/rule_rewards.hpp"

#include <algorithm>
#include <random>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {
// Partial credit (rule_rewards.hpp): characters in place, characters in common, digits.
constexpr double kInPlaceWeight = 0.6, kCommonWeight = 0.25, kDigitsWeight = 0.15;
}  // namespace
namespace {

// Uniform in [0, bound) by rejection, written out: std::uniform_int_distribution's algorithm is
// implementation-defined, and the shipped prompt files must come out the same everywhere.
// (mt19937_64's own output is fixed by the standard.)
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  // 2^64 mod bound values at the bottom would favour the small residues: skip them.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

[[noreturn]] void not_a_prompt(const std::string& task, const std::string& prompt,
                               const std::string& expected) {
  fail(__FILE__, __LINE__, "prompt \"" + prompt + "\" is not a " + task + " prompt (expected " +
                               expected + ")");
}

// "sort 3817=" -> "1378": 3 to 6 digits (leading zeros are digits like any other).
class SortDigits : public RuleReward {
 public:
  std::string name() const override { return "sort_digits"; }

  std::string answer(const std::string& prompt) const override {
    static const char* kShape = "\"sort \" followed by 3 to 6 digits and \"=\", e.g. \"sort 3817=\"";
    const std::string head = "sort ";
    if (!starts_with(prompt, head) || prompt.back() != '=') not_a_prompt(name(), prompt, kShape);
    std::string digits = prompt.substr(head.size(), prompt.size() - head.size() - 1);
    if (digits.size() < 3 || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), is_digit))
      not_a_prompt(name(), prompt, kShape);
    std::sort(digits.begin(), digits.end());
    return digits;
  }

  std::vector<std::string> make_prompts(int count, uint64_t seed) const override {
    QUARTET_CHECK(count >= 0, "make_prompts: count " + std::to_string(count) + " is negative");
    std::mt19937_64 rng(seed);
    std::vector<std::string> out;
    out.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      const uint64_t length = 3 + uniform_below(rng, 4);  // 3..6
      std::string p = "sort ";
      for (uint64_t k = 0; k < length; ++k) p += static_cast<char>('0' + uniform_below(rng, 10));
      out.push_back(p + "=");
    }
    return out;
  }
};

// "add 27+58=" -> "85": operands 0 to 99 in plain decimal (no sign, no leading zeros).
class Add : public RuleReward {
 public:
  std::string name() const override { return "add"; }

  std::string answer(const std::string& prompt) const override {
    static const char* kShape =
        "\"add A+B=\" with A and B from 0 to 99 written without leading zeros, e.g. \"add 27+58=\"";
    const std::string head = "add ";
    if (!starts_with(prompt, head) || prompt.back() != '=') not_a_prompt(name(), prompt, kShape);
    const std::string body = prompt.substr(head.size(), prompt.size() - head.size() - 1);
    const size_t plus = body.find('+');
    if (plus == std::string::npos) not_a_prompt(name(), prompt, kShape);
    const int a = operand(body.substr(0, plus)), b = operand(body.substr(plus + 1));
    if (a < 0 || b < 0) not_a_prompt(name(), prompt, kShape);
    return std::to_string(a + b);
  }

  std::vector<std::string> make_prompts(int count, uint64_t seed) const override {
    QUARTET_CHECK(count >= 0, "make_prompts: count " + std::to_string(count) + " is negative");
    std::mt19937_64 rng(seed);
    std::vector<std::string> out;
    out.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      const uint64_t a = uniform_below(rng, 100);  // drawn in this order: a, then b
      const uint64_t b = uniform_below(rng, 100);
      out.push_back("add " + std::to_string(a) + "+" + std::to_string(b) + "=");
    }
    return out;
  }

 private:
  // 0..99 as the generator writes it, or -1 for anything else ("07", "", "100", "+5", " 5").
  static int operand(const std::string& s) {
    if (s.empty() || s.size() > 2 || !std::all_of(s.begin(), s.end(), is_digit)) return -1;
    if (s.size() == 2 && s[0] == '0') return -1;
    return std::stoi(s);
  }
};

}  // namespace

double RuleReward::score(const std::string& prompt, const std::string& completion) const {
  const std::string want = answer(prompt);  // refuses a prompt of another task
  // The caller has cut the decoded text at EOS; a newline is the other stop.
  const std::string got = completion.substr(0, completion.find('\n'));
  if (got.empty()) return 0.0;
  if (got == want) return 1.0;
  // Dividing by the longer of the two makes extra characters cost as much as missing ones.
  const double longer = static_cast<double>(std::max(want.size(), got.size()));
  size_t in_place = 0;
  for (size_t i = 0; i < std::min(want.size(), got.size()); ++i) in_place += want[i] == got[i];
  int counts[256] = {0};
  for (unsigned char c : want) ++counts[c];
  size_t common = 0, digits = 0;
  for (unsigned char c : got) {
    if (counts[c] > 0) {
      --counts[c];
      ++common;
    }
    digits += c >= '0' && c <= '9';
  }
  return kInPlaceWeight * static_cast<double>(in_place) / longer + kCommonWeight * static_cast<double>(common) / longer +
         kDigitsWeight * static_cast<double>(digits) / static_cast<double>(got.size());
}

std::unique_ptr<RuleReward> make_rule_reward(const std::string& task) {
  if (task == "sort_digits") return std::make_unique<SortDigits>();
  if (task == "add") return std::make_unique<Add>();
  fail(__FILE__, __LINE__, "unknown rule reward task '" + task + "' (known: sort_digits, add)");
}

}  // namespace quartet
