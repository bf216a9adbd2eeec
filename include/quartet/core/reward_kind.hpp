#pragma once
// A reward as the deck names it (model.reward.kind, each of reward.terms, eval.reward), parsed
// once when the deck is read (docs/rewards.md, docs/reward-programs.md):
//   model                  the reward model's score (a model at model.reward.path)
//   rule:<task>            a built-in verifiable reward (rl/rewards/rule_rewards.hpp)
//   math | match | regex | format   answer checkers (rl/rewards/reward_terms.hpp)
//   command:<command line> the user's program, one per actor rank (rl/rewards/reward_program.hpp)
//   http://... | https://... | http:<URL>   the user's endpoint (rl/rewards/reward_endpoint.hpp)
#include <string>

namespace quartet {

struct RewardKind {
  enum class Type { model, rule, math, match, regex, format, command, http };
  Type type = Type::model;
  std::string argument;  // rule: the task; command: the command line; http: the URL; else ""
  std::string text = "model";  // as the deck spells it

  bool is_model() const { return type == Type::model; }
  bool is_user_code() const { return type == Type::command || type == Type::http; }
  // The name a term is logged under before it is made: its type ("rule", "command", "http", ...).
  const char* type_name() const;
};

// Throws std::invalid_argument saying what is wrong, to follow "<key> names '<text>'": ", which is
// not a reward kind (known: ...)" or ": rule needs what follows its ':' (...)".
RewardKind parse_reward_kind(const std::string& text);

// "model, rule:<task>, math, match, regex, format, command:<command line>, http://..."
std::string reward_kind_list();

}  // namespace quartet
