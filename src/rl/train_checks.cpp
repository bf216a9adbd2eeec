#include "quartet/rl/train_checks.hpp"

#include <cstdio>

#include "quartet/core/run_config.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_config.hpp"

namespace quartet {

namespace {

// The ranks that wait for an actor rank's rewards give up after dist.watchdog_timeout: the
// longest a reward in the user's code may take must stay below it, or a slow program would end
// the job with the watchdog's report instead of the reward's own error.
void check_reward_call_fits_watchdog(const Config& cfg, const RewardKind& kind) {
  const RewardCallConfig& c = cfg.get<RewardCallConfig>();
  const bool http = kind.type == RewardKind::Type::http;
  double longest = c.timeout, delay = c.retry_delay;
  if (http)
    for (int r = 0; r < c.retries; ++r, delay *= 2) longest += delay + c.timeout;
  const double watchdog = cfg.get<DistConfig>().watchdog_timeout;
  auto text = [](double seconds) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", seconds);
    return std::string(b);
  };
  if (longest >= watchdog)
    cfg.deck.fail("model.reward.timeout",
                  "is " + text(c.timeout) + (http ? ": with model.reward.retries and retry_delay a batch may take " +
                                                        text(longest) : std::string()) +
                      ", not less than dist.watchdog_timeout = " + text(watchdog) +
                      ", after which the ranks waiting for the rewards end the job: lower it or raise the watchdog's");
  if (!http && c.start_timeout >= watchdog)
    cfg.deck.fail("model.reward.start_timeout", "is " + text(c.start_timeout) + ", not less than dist.watchdog_timeout = " +
                                                    text(watchdog) + ", after which the other ranks end the job");
}

// The rewards in the user's code: model.reward.kind's, or reward.terms', and eval.reward's.
std::vector<RewardKind> user_code_kinds(const Config& cfg) {
  const RewardConfig& rewards = cfg.get<RewardConfig>();
  std::vector<RewardKind> kinds = rewards.terms.empty() ? std::vector<RewardKind>{cfg.get<ModelsConfig>().reward.kind}
                                                        : rewards.terms;
  if (const auto& eval = cfg.get<EvalConfig>().reward) kinds.push_back(*eval);
  std::vector<RewardKind> out;
  for (const RewardKind& kind : kinds)
    if (kind.is_user_code()) out.push_back(kind);
  return out;
}

void check_roles(const Config& cfg, const Placement& placement) {
  const Deck& deck = cfg.deck;
  const bool disjoint = placement.mode == PlacementMode::disjoint;
  const char* algorithm = name_of(cfg.get<AlgorithmConfig>().algorithm);
  if (!placement.has(Role::actor)) deck.fail("placement.actor", "must give the actor at least one rank");
  const bool critic = algorithm_spec(cfg.get<AlgorithmConfig>().algorithm).trains_critic;
  if (critic && !placement.has(Role::critic))
    deck.fail("placement.critic", "is 0, but algorithm.name = " + std::string(algorithm) +
                                      " needs a critic (or use grpo | rloo | reinforce++)");
  if (!critic && placement.has(Role::critic)) {
    const std::string why = disjoint ? "gives the critic ranks" : "is not 0, so colocated placement puts a critic on every rank";
    deck.fail("placement.critic", why + ", but " + algorithm + " has no critic: set it to 0");
  }
  // The text rewards themselves are made, and refused by name, by rl/rewards/reward_terms.hpp.
  for (const RewardKind& kind : user_code_kinds(cfg)) check_reward_call_fits_watchdog(cfg, kind);
  const std::string reward = cfg.get<RewardConfig>().terms.empty() ? "model.reward.kind is " + cfg.get<ModelsConfig>().reward.kind.text
                                                                   : std::string("reward.terms has no model term");
  if (!uses_reward_model(cfg)) {
    if (placement.has(Role::reward) && disjoint)
      deck.fail("placement.reward", "gives the reward ranks, but " + reward + " (scored on the actor ranks): set it to 0");
  } else {
    const std::string why = cfg.get<RewardConfig>().terms.empty() ? "model.reward.kind is model" : "reward.terms has a model term";
    if (cfg.get<ModelsConfig>().reward.path.empty()) deck.fail("model.reward.path", "is not set and " + why);
    if (!placement.has(Role::reward)) deck.fail("placement.reward", "is 0, but a reward model needs ranks");
  }
  if (!placement.has(Role::reference) && cfg.get<AlgorithmConfig>().kl_coef > 0)
    deck.fail("placement.reference", "is 0, but algorithm.kl_coef > 0 needs the reference model");
}

}  // namespace

void check_train_deck(const Config& cfg, const Placement& placement) {
  // A stage's deck (an rm deck may give the actor no ranks) is refused before its placement is.
  refuse_other_stages(cfg, "train");
  check_roles(cfg, placement);
  if (cfg.get<RolloutConfig>().prompts.empty()) cfg.deck.fail("rollout.prompts", "is not set: train needs a prompts file");
  if (cfg.get<ProfileConfig>().iteration > cfg.get<RunConfig>().iterations)
    cfg.deck.fail("profile.iteration", "is " + std::to_string(cfg.get<ProfileConfig>().iteration) + ", past run.iterations = " +
                                           std::to_string(cfg.get<RunConfig>().iterations) + ": nothing would be profiled");
  const AlgorithmConfig& al = cfg.get<AlgorithmConfig>();
  if (al.overlong_buffer >= cfg.get<RolloutConfig>().max_new_tokens)
    cfg.deck.fail("algorithm.overlong_buffer", "is " + std::to_string(al.overlong_buffer) +
                                                   ", which must be below rollout.max_new_tokens (" +
                                                   std::to_string(cfg.get<RolloutConfig>().max_new_tokens) +
                                                   "): the penalty starts at max_new_tokens - overlong_buffer tokens");
  if (al.dynamic_sampling && algorithm_spec(al.algorithm).trains_critic)
    cfg.deck.fail("algorithm.dynamic_sampling", std::string("is on, but ") + name_of(al.algorithm) +
                                                    " trains a critic, whose rollouts would have to follow the "
                                                    "actor's choice: use grpo | rloo | reinforce++ | reinforce++-baseline");
  // A minibatch is drawn from one actor rank's sequences of an iteration: a larger one is not
  // what the deck asks for (it would silently be the whole batch).
  const int64_t rows = int64_t(cfg.get<RolloutConfig>().batch) * al.samples_per_prompt;
  if (al.minibatch > rows)
    cfg.deck.fail("algorithm.minibatch", "is " + std::to_string(al.minibatch) + ", more than the " + std::to_string(rows) +
                                             " sequences an actor rank has each iteration (rollout.batch " +
                                             std::to_string(cfg.get<RolloutConfig>().batch) + " x algorithm.samples_per_prompt " +
                                             std::to_string(al.samples_per_prompt) + ")");
}

void check_prompts_fit_actor(const Config& cfg) {
  for (const auto& [key, path] : {std::pair<const char*, std::string>{"rollout.prompts", cfg.get<RolloutConfig>().prompts},
                                  {"eval.prompts", cfg.get<EvalConfig>().prompts}}) {
    if (path.empty()) continue;
    std::optional<PromptFileHeader> header;
    try {
      header = prepared_prompts_header(path);
    } catch (const Error& e) {
      cfg.deck.fail(key, std::string("is '") + path + "': " + e.what());
    }
    if (!header) continue;
    const ModelSpec actor = resolve_model(cfg, Role::actor);
    const TokenizerIdentity id = actor.random ? builtin_tokenizer_identity() : model_dir_identity(actor.dir);
    const std::string misfit = prompt_header_misfit(*header, id);
    if (!misfit.empty()) cfg.deck.fail(key, "names a file prepared for another actor: " + misfit);
  }
}

}  // namespace quartet
