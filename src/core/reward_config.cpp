#include "quartet/core/reward_config.hpp"

#include <boost/program_options/options_description.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"

namespace po = boost::program_options;

namespace quartet {

po::options_description reward_schema() {
  const RewardConfig r;
  po::options_description d("Rewards");
  d.add_options()
    ("reward.terms", po::value<std::string>()->default_value(""), "several rewards at once, comma-separated: model (the reward model's score) | rule:<task> | math | match | regex | format | command:<command line> | http://... (the user's code: docs/reward-programs.md; a command line here holds no comma); the total is their weighted sum, each logged as reward.<name> (\"\" = model.reward.kind alone; docs/rewards.md)")
    ("reward.weights", po::value<std::string>()->default_value(""), "one weight per term of reward.terms, comma-separated (\"\" = all 1)")
    ("reward.answer_in_tags", po::value<bool>()->default_value(r.answer_in_tags), "math, match, regex: the completion's answer is the text between the last reward.format_open and the reward.format_close after it (none: wrong); false: the whole completion")
    ("reward.math_last_number", po::value<bool>()->default_value(r.math_last_number), "math: a completion with no explicit final answer (#### N, \\boxed{...}, \"the answer is ...\") is graded by its last number; false: it scores 0")
    ("reward.math_tolerance", po::value<double>()->default_value(r.math_tolerance), "math: two numbers are equal when they differ by at most this times the larger magnitude (at least 1) (>= 0)")
    ("reward.match_strip", po::value<bool>()->default_value(r.match_strip), "match, regex: whitespace around the answer and the completion's answer is ignored")
    ("reward.match_ignore_case", po::value<bool>()->default_value(r.match_ignore_case), "match, regex: letters compare without case (ASCII)")
    ("reward.regex_pattern", po::value<std::string>()->default_value(r.regex_pattern), "regex: a PCRE2 pattern whose first capture group (else whole match), at its last match in the completion, is compared with the answer as match compares; \"\" = the prompt row's answer is the pattern, which the whole completion must match")
    ("reward.format_open", po::value<std::string>()->default_value(r.format_open), "format (and answer_in_tags): the answer's opening tag")
    ("reward.format_close", po::value<std::string>()->default_value(r.format_close), "format (and answer_in_tags): the answer's closing tag")
    ("reward.format_regex", po::value<std::string>()->default_value(r.format_regex), "format: \"\" = 1 when the completion holds one opening tag, some text and one closing tag; else 1 when the whole completion matches this PCRE2 pattern");
  return d;
}

namespace {

std::vector<double> parse_weights(const Deck& deck, size_t terms) {
  const std::vector<std::string> texts = split_list(deck.get<std::string>("reward.weights"));
  if (texts.empty()) return std::vector<double>(terms, 1.0);
  if (terms == 0) deck.fail("reward.weights", "is given, but reward.terms names no terms to weigh");
  if (texts.size() != terms)
    deck.fail("reward.weights", "has " + std::to_string(texts.size()) + " weights for the " + std::to_string(terms) +
                                    " terms of reward.terms");
  std::vector<double> weights;
  for (const std::string& t : texts) {
    size_t used = 0;
    double w = 0;
    try {
      w = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != t.size() || !std::isfinite(w))
      deck.fail("reward.weights", "has '" + t + "', which is not a finite number");
    weights.push_back(w);
  }
  return weights;
}

}  // namespace

RewardConfig load_reward_config(const Deck& deck) {
  RewardConfig r;
  r.terms = split_list(deck.get<std::string>("reward.terms"));
  for (size_t i = 0; i < r.terms.size(); ++i) {
    if (std::find(r.terms.begin(), r.terms.begin() + static_cast<std::ptrdiff_t>(i), r.terms[i]) !=
        r.terms.begin() + static_cast<std::ptrdiff_t>(i))
      deck.fail("reward.terms", "names " + r.terms[i] + " twice");
  }
  r.weights = parse_weights(deck, r.terms.size());
  if (!r.terms.empty()) {
    // One way to name the reward: with terms, model.reward.kind keeps its default and a reward
    // model is one of the terms.
    if (deck.given("model.reward.kind"))
      deck.fail("model.reward.kind", "is given, and so is reward.terms (" + deck.where("reward.terms") +
                                         "): name every reward among the terms (model for the reward model)");
    const bool model_term = std::find(r.terms.begin(), r.terms.end(), "model") != r.terms.end();
    if (!model_term && !deck.get<std::string>("model.reward.path").empty())
      deck.fail("model.reward.path", "is set, but reward.terms has no model term: add model to the terms, or "
                                     "leave the path out");
  }
  r.answer_in_tags = deck.get<bool>("reward.answer_in_tags");
  r.math_last_number = deck.get<bool>("reward.math_last_number");
  r.math_tolerance = deck.get<double>("reward.math_tolerance");
  if (!(r.math_tolerance >= 0 && std::isfinite(r.math_tolerance)))
    deck.fail("reward.math_tolerance", "must be a finite number >= 0");
  r.match_strip = deck.get<bool>("reward.match_strip");
  r.match_ignore_case = deck.get<bool>("reward.match_ignore_case");
  r.regex_pattern = deck.get<std::string>("reward.regex_pattern");
  r.format_open = deck.get<std::string>("reward.format_open");
  r.format_close = deck.get<std::string>("reward.format_close");
  r.format_regex = deck.get<std::string>("reward.format_regex");
  for (const char* k : {"reward.format_open", "reward.format_close"})
    if (deck.get<std::string>(k).empty()) deck.fail(k, "must not be empty");
  return r;
}

bool uses_reward_model(const Config& config) {
  const std::vector<std::string>& terms = config.rewards.terms;
  if (terms.empty()) return config.reward.kind == "model";
  return std::find(terms.begin(), terms.end(), "model") != terms.end();
}

}  // namespace quartet
