#include "quartet/rl/rewards/reward_config.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "quartet/core/units.hpp"
#include "quartet/model/models_config.hpp"

namespace quartet {

namespace {

using R = RewardConfig;

std::vector<RewardKind> parse_terms(const std::string& text) {
  std::vector<RewardKind> terms;
  for (const std::string& item : split_list(text)) {
    for (const RewardKind& earlier : terms)
      if (earlier.text == item) throw std::invalid_argument("names " + item + " twice");
    try {
      terms.push_back(parse_reward_kind(item));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("names '" + item + "'" + e.what());
    }
  }
  return terms;
}

std::vector<double> parse_weights(const std::string& text) {
  std::vector<double> weights;
  for (const std::string& t : split_list(text)) {
    size_t used = 0;
    const double w = leading_number(t, &used);
    if (used == 0 || used != t.size() || !std::isfinite(w))
      throw std::invalid_argument("has '" + t + "', which is not a finite number");
    weights.push_back(w);
  }
  return weights;
}

// The weights against the terms, and one way to name the reward: with terms, model.reward.kind
// keeps its default and a reward model is one of the terms.
void check_terms(const Deck& deck, R& r) {
  const size_t terms = r.terms.size();
  if (r.weights.empty()) r.weights.assign(terms, 1.0);
  else if (terms == 0) deck.fail("reward.weights", "is given, but reward.terms names no terms to weigh");
  else if (r.weights.size() != terms)
    deck.fail("reward.weights", "has " + std::to_string(r.weights.size()) + " weights for the " + std::to_string(terms) +
                                    " terms of reward.terms");
  if (terms == 0) return;
  if (deck.given("model.reward.kind"))
    deck.fail("model.reward.kind", "is given, and so is reward.terms (" + deck.where("reward.terms") +
                                       "): name every reward among the terms (model for the reward model)");
  const bool model_term = std::any_of(r.terms.begin(), r.terms.end(), [](const RewardKind& k) { return k.is_model(); });
  if (!model_term && !deck.get<std::string>("model.reward.path").empty())
    deck.fail("model.reward.path", "is set, but reward.terms has no model term: add model to the terms, or "
                                   "leave the path out");
}

}  // namespace

const Section<RewardConfig>& reward_section() {
  static const Section<R> section("reward", "Rewards", {
      parsed<R, std::vector<RewardKind>>("terms", &R::terms, "", parse_terms, "several rewards at once, comma-separated: model (the reward model's score) | rule:<task> | math | match | regex | format | command:<command line> | http://... (the user's code: docs/reward-programs.md; a command line here holds no comma); the total is their weighted sum, each logged as reward.<name> (\"\" = model.reward.kind alone; docs/rewards.md)"),
      parsed<R, std::vector<double>>("weights", &R::weights, "", parse_weights, "one weight per term of reward.terms, comma-separated (\"\" = all 1)"),
      key("answer_in_tags", &R::answer_in_tags, "math, match, regex: the completion's answer is the text between the last reward.format_open and the reward.format_close after it (none: wrong); false: the whole completion"),
      key("math_last_number", &R::math_last_number, "math: a completion with no explicit final answer (#### N, \\boxed{...}, \"the answer is ...\") is graded by its last number; false: it scores 0"),
      key("math_tolerance", &R::math_tolerance, Check<double>([](const double& t) { return t >= 0 && std::isfinite(t) ? "" : "must be a finite number >= 0"; }), "math: two numbers are equal when they differ by at most this times the larger magnitude (at least 1) (>= 0)"),
      key("match_strip", &R::match_strip, "match, regex: whitespace around the answer and the completion's answer is ignored"),
      key("match_ignore_case", &R::match_ignore_case, "match, regex: letters compare without case (ASCII)"),
      key("regex_pattern", &R::regex_pattern, "regex: a PCRE2 pattern whose first capture group (else whole match), at its last match in the completion, is compared with the answer as match compares; \"\" = the prompt row's answer is the pattern, which the whole completion must match"),
      key("format_open", &R::format_open, not_empty(), "format (and answer_in_tags): the answer's opening tag"),
      key("format_close", &R::format_close, not_empty(), "format (and answer_in_tags): the answer's closing tag"),
      key("format_regex", &R::format_regex, "format: \"\" = 1 when the completion holds one opening tag, some text and one closing tag; else 1 when the whole completion matches this PCRE2 pattern"),
  }, check_terms);
  return section;
}

bool uses_reward_model(const Config& config) {
  const std::vector<RewardKind>& terms = config.get<RewardConfig>().terms;
  if (terms.empty()) return config.get<ModelsConfig>().reward.kind.is_model();
  return std::any_of(terms.begin(), terms.end(), [](const RewardKind& k) { return k.is_model(); });
}

}  // namespace quartet
