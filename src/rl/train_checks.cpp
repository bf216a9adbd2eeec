#include "quartet/rl/train_checks.hpp"

#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/rule_rewards.hpp"

namespace quartet {

namespace {

void check_roles(const Config& cfg, const Placement& placement) {
  const Deck& deck = cfg.deck;
  const bool disjoint = placement.mode == PlacementMode::disjoint;
  const char* algorithm = name_of(cfg.algorithm.algorithm);
  if (!placement.has(Role::actor)) deck.fail("placement.actor", "must give the actor at least one rank");
  const bool critic = algorithm_spec(cfg.algorithm.algorithm).trains_critic;
  if (critic && !placement.has(Role::critic))
    deck.fail("placement.critic", "is 0, but algorithm.name = " + std::string(algorithm) +
                                      " needs a critic (or use grpo | rloo | reinforce++)");
  if (!critic && placement.has(Role::critic) && disjoint)
    deck.fail("placement.critic", "gives the critic ranks, but " + std::string(algorithm) + " has no critic: set it to 0");
  if (cfg.reward.kind.rfind("rule:", 0) == 0) {
    make_rule_reward(cfg.reward.kind.substr(5));  // an unknown task is refused by name
    if (placement.has(Role::reward) && disjoint)
      deck.fail("placement.reward", "gives the reward ranks, but model.reward.kind is " + cfg.reward.kind +
                                        " (scored on the actor ranks): set it to 0");
  } else {
    if (cfg.reward.path.empty()) deck.fail("model.reward.path", "is not set and model.reward.kind is model");
    if (!placement.has(Role::reward)) deck.fail("placement.reward", "is 0, but a reward model needs ranks");
  }
  if (!placement.has(Role::reference) && cfg.algorithm.kl_coef > 0)
    deck.fail("placement.reference", "is 0, but algorithm.kl_coef > 0 needs the reference model");
}

}  // namespace

void check_train_deck(const Config& cfg, const Placement& placement) {
  check_roles(cfg, placement);
  if (cfg.rollout.prompts.empty()) cfg.deck.fail("rollout.prompts", "is not set: train needs a prompts file");
  if (cfg.profile.iteration > cfg.run.iterations)
    cfg.deck.fail("profile.iteration", "is " + std::to_string(cfg.profile.iteration) + ", past run.iterations = " +
                                           std::to_string(cfg.run.iterations) + ": nothing would be profiled");
  // A minibatch is drawn from one actor rank's sequences of an iteration: a larger one is not
  // what the deck asks for (it would silently be the whole batch).
  const AlgorithmConfig& al = cfg.algorithm;
  const int64_t rows = int64_t(cfg.rollout.batch) * al.samples_per_prompt;
  if (al.minibatch > rows)
    cfg.deck.fail("algorithm.minibatch", "is " + std::to_string(al.minibatch) + ", more than the " + std::to_string(rows) +
                                             " sequences an actor rank has each iteration (rollout.batch " +
                                             std::to_string(cfg.rollout.batch) + " x algorithm.samples_per_prompt " +
                                             std::to_string(al.samples_per_prompt) + ")");
}

void check_prompts_fit_actor(const Config& cfg) {
  for (const auto& [key, path] : {std::pair<const char*, std::string>{"rollout.prompts", cfg.rollout.prompts},
                                  {"eval.prompts", cfg.eval.prompts}}) {
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
