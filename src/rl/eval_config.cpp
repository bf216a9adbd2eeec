#include "quartet/rl/eval_config.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "quartet/core/files.hpp"
#include "quartet/core/units.hpp"

namespace quartet {

namespace {

using E = EvalConfig;

std::vector<int> parse_k(const std::string& text) {
  std::vector<int> ks;
  for (const std::string& item : split_list(text)) {
    size_t used = 0;
    const long long k = leading_integer(item, &used);
    if (used != item.size() || k < 1 || k > INT_MAX)
      throw std::invalid_argument("holds '" + item + "'; expected comma-separated whole numbers >= 1");
    ks.push_back(static_cast<int>(k));
  }
  return ks;
}

std::optional<RewardKind> parse_eval_reward(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text == "model")
    throw std::invalid_argument("is model: the reward model grades the evaluation when it is the run's reward (leave "
                                "eval.reward out); eval.reward names a text reward instead");
  try {
    return parse_reward_kind(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("names '" + text + "'" + e.what());
  }
}

// A key set away from its default means evaluation was wanted. (Defaults spelled out, as a
// resolved deck spells them, are fine.)
void refuse_keys_without_prompts(const Deck& deck, const E& e) {
  const E d;
  const std::pair<const char*, bool> changed[] = {
      {"eval.prompt_field", !e.prompt_field.empty()},        {"eval.every", e.every != d.every},
      {"eval.at_start", e.at_start != d.at_start},            {"eval.at_end", e.at_end != d.at_end},
      {"eval.count", e.count != d.count},                     {"eval.samples", e.samples != d.samples},
      {"eval.k", !e.k.empty()},                               {"eval.temperature", e.temperature != d.temperature},
      {"eval.max_new_tokens", e.max_new_tokens != d.max_new_tokens},
      {"eval.pass_threshold", e.pass_threshold != d.pass_threshold}, {"eval.reward", e.reward.has_value()}};
  for (const auto& [key, differs] : changed)
    if (differs) deck.fail(key, "is set, but eval.prompts is not: name the held-out prompts file to evaluate on");
}

// What the eval keys say together; the rollout's max_new_tokens bounds the eval's (the memory
// plan, the width buckets and the models' positions are sized by it).
void check_eval(const Deck& deck, E& e) {
  if (e.prompts.empty()) return refuse_keys_without_prompts(deck, e);
  if (e.prompt_field.empty()) e.prompt_field = deck.get<std::string>("rollout.prompt_field");
  if (e.every == 0 && !e.at_end && !e.at_start)
    deck.fail("eval.at_end", "is false, and eval.every is 0 and eval.at_start false: the run would never evaluate");
  const int rollout_max = deck.get<int>("rollout.max_new_tokens");
  if (e.max_new_tokens == 0) e.max_new_tokens = rollout_max;
  if (e.max_new_tokens > rollout_max)
    deck.fail("eval.max_new_tokens", "is " + std::to_string(e.max_new_tokens) +
                                         ", more than rollout.max_new_tokens = " + std::to_string(rollout_max) +
                                         " (the memory plan and the models' positions are sized by the rollout's): "
                                         "raise that one");
  for (int k : e.k)
    if (k > e.samples)
      deck.fail("eval.k", "asks for pass@" + std::to_string(k) + ", which needs eval.samples >= " + std::to_string(k) +
                              " (it is " + std::to_string(e.samples) + ")");
  std::sort(e.k.begin(), e.k.end());
  e.k.erase(std::unique(e.k.begin(), e.k.end()), e.k.end());
}

}  // namespace

const Section<EvalConfig>& eval_section() {
  static const Section<E> section("eval", "Evaluation on held-out prompts (train)", {
      key("prompts", &E::prompts, readable_file_or_empty(), "held-out prompts file measured during training, in any format rollout.prompts reads (\"\" = no evaluation)"),
      key("prompt_field", &E::prompt_field, "plain JSONL field with the prompt text (\"\" = rollout.prompt_field)"),
      key("every", &E::every, at_least(0), "evaluate every N iterations (0 = only at the end)"),
      key("at_start", &E::at_start, "also evaluate before the first iteration (the series' point at iteration 0)"),
      key("at_end", &E::at_end, "evaluate after the last iteration"),
      key("count", &E::count, at_least(0), "prompts evaluated: the first N of the file (0 = all), shared out over the actor ranks"),
      key("samples", &E::samples, at_least(0), "completions sampled per prompt for n-sample pass@1 and pass@k (0 = greedy only)"),
      parsed<E, std::vector<int>>("k", &E::k, "", parse_k, "comma-separated k of pass@k, each 1 .. eval.samples (unbiased estimator of Chen et al. 2021)"),
      key("temperature", &E::temperature, above(0.0, "(greedy pass@1 is measured anyway)"), "sampling temperature of the n-sample part (> 0; greedy pass@1 is always at 0)"),
      key("max_new_tokens", &E::max_new_tokens, at_least(0), "tokens generated at most per completion (0 = rollout.max_new_tokens, which it may not exceed)"),
      key("pass_threshold", &E::pass_threshold, "a completion passes when its reward is at least this (1.0: exactly right under the rule rewards)"),
      parsed<E, std::optional<RewardKind>>("reward", &E::reward, "", parse_eval_reward, "the reward that grades the evaluation: \"\" = the run's own (reward.terms or model.reward.kind); else one text reward kind: rule:<task> | math | match | regex | format | command:<command line> | http://... (e.g. match: exact-match accuracy against the prompts' answers while training against a learnt reward model)"),
  }, check_eval);
  return section;
}

}  // namespace quartet
