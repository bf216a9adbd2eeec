#include "quartet/engine/role_models.hpp"

#include <cstdio>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/io/sharded_h5.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/model/tokenizer/same_token_ids.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

namespace {

// The seed of a role's random weights: the reference shares the actor's (it is the frozen
// initial policy); the others get their own.
std::uint64_t weight_seed(const Config& config, Role role) {
  const std::uint64_t base = config.get<RunConfig>().seed * 7919u;
  switch (role) {
    case Role::actor:
    case Role::reference: return base + 1;
    case Role::critic: return base + 2;
    case Role::reward: return base + 3;
  }
  return base;
}

}  // namespace

HeadSource head_source_of(Role role, bool trained) {
  if (role == Role::critic || (role == Role::reward && trained)) return HeadSource::fresh_if_missing;
  return HeadSource::checkpoint;
}

RoleModels build_role_models(const Config& config, const ModelGroups& groups, torch::Device device,
                             const std::string& resume_dir) {
  RoleModels out;
  for (Role role : kAllRoles) {
    if (!groups.has(role) || !has_model(config, role)) continue;
    const Group& g = groups.of(role);
    if (!g.member()) continue;
    auto rm = std::make_unique<RoleModel>();
    rm->spec = resolve_model(config, role);
    rm->group = g.coll.get();
    rm->comm = g.comm;
    const ModelSectionConfig& sec = model_section(config, role);
    ShardOptions so;
    so.dtype = rm->spec.dtype;
    so.trainable = rm->spec.trained;
    so.checkpointing = sec.checkpointing;
    so.reshard_after_forward = sec.reshard_after_forward;
    so.offload_params = sec.offload_params;
    so.reduce_fp32 = config.get<TrainConfig>().reduce_dtype == ReducePrecision::float32;
    ParamSource source;
    std::unique_ptr<ShardedH5Reader> saved;
    if (!resume_dir.empty() && rm->spec.trained) {
      saved = std::make_unique<ShardedH5Reader>(resume_dir + "/" + role_name(role) + ".h5", g.comm);
      source = saved->source("model");
    } else if (rm->spec.random) {
      source = source_random(rm->spec.config, weight_seed(config, role), device);
    } else {
      // Every role loads by the same rules as generate (model/weight_map.hpp).
      auto ckpt = std::make_shared<SafetensorsCheckpoint>(rm->spec.dir);
      const HeadSource heads = head_source_of(role, rm->spec.trained);
      WeightMap map;
      source = source_from_checkpoint(ckpt, rm->spec.config, rm->spec.head, heads,
                                      heads == HeadSource::fresh_if_missing
                                          ? source_random(rm->spec.config, weight_seed(config, role), device)
                                          : ParamSource{},
                                      &map);
      if (g.rank == 0 && !map.note().empty())
        std::printf("model: the %s (%s) %s\n", role_name(role), rm->spec.dir.c_str(), map.note().c_str());
    }
    rm->model = std::make_unique<ShardedModel>(rm->spec.config, rm->spec.head, *rm->group, so, source);
    if (rm->spec.trained) {
      AdamWOptions ao;
      ao.lr = sec.lr;
      ao.weight_decay = sec.weight_decay;
      ao.beta1 = config.get<TrainConfig>().adam_beta1;
      ao.beta2 = config.get<TrainConfig>().adam_beta2;
      ao.eps = config.get<TrainConfig>().adam_eps;
      ao.max_grad_norm = config.get<TrainConfig>().max_grad_norm;
      ao.offload = sec.offload_optimizer;
      rm->optimizer = std::make_unique<ShardedAdamW>(*rm->model, ao);
      if (saved)
        rm->optimizer->load_sliced(saved->source("optimizer/master"), saved->source("optimizer/exp_avg"),
                                   saved->source("optimizer/exp_avg_sq"), saved->int_attribute("optimizer_steps"));
    }
    out.roles[static_cast<int>(role)] = std::move(rm);
  }
  return out;
}

std::unique_ptr<Tokenizer> run_tokenizer(const Config& config) {
  const ModelSpec owner = resolve_model(config, tokenizer_role(config));
  if (owner.random) return make_builtin_tokenizer();
  return load_model_tokenizer(owner.dir);
}

namespace {

// A critic or reference from a directory of its own reads the actor's ids: its tokenizer must
// give each of them the same token (model/tokenizer/same_token_ids.hpp). A reward model with another
// tokenizer reads the rollouts as text instead (rl/rewards/reward_retokenizer.hpp checks it). (In an rm
// deck the reward model is alone, and the run's tokenizer is its own.)
void check_reads_actor_ids(const Config& config, const ModelSpec& spec, const Tokenizer& actor_tokenizer) {
  const std::string key = "model." + std::string(role_name(spec.role)) + ".path";
  if (spec.role == tokenizer_role(config) || spec.role == Role::reward) return;
  const ModelSpec actor = resolve_model(config, Role::actor);
  if (spec.dir.empty() || spec.dir == actor.dir) return;
  const std::string given = model_section(config, spec.role).source;
  if (!is_regular_file(spec.dir + "/tokenizer.json"))
    config.deck.fail(key, "is '" + given + "', which has no tokenizer.json: quartet cannot check that the " +
                              role_name(spec.role) + " reads the actor's token ids as the actor means them "
                              "(copy in the tokenizer files of the model it was trained from)");
  std::string mismatch;
  try {
    mismatch = token_id_mismatch(actor_tokenizer, *load_model_tokenizer(spec.dir));
  } catch (const Error& e) {
    config.deck.fail(key, "is '" + given + "': " + e.what());
  }
  if (!mismatch.empty())
    config.deck.fail(key, "is '" + given + "', whose tokenizer is not the actor's (" +
                              (actor.random ? std::string("the built-in one") : actor.dir + "/tokenizer.json") +
                              "): " + mismatch + "; the " + role_name(spec.role) +
                              " is given the actor's token ids, so it must share the actor's vocabulary");
}

}  // namespace

void check_models_fit_run(const Config& config, const Placement& placement, const Tokenizer& tokenizer) {
  const int64_t positions = int64_t(config.get<RolloutConfig>().max_prompt_tokens) + config.get<RolloutConfig>().max_new_tokens;
  for (Role role : kAllRoles) {
    if (!placement.has(role) || !has_model(config, role)) continue;
    const ModelSpec spec = resolve_model(config, role);
    const std::string key = "model." + std::string(role_name(role)) + ".path";
    // A reward model's own tokenizer is checked against it by rl/rewards/reward_retokenizer.hpp.
    const bool own_tokenizer = role == Role::reward && tokenizer_role(config) != Role::reward;
    const std::string misfit = own_tokenizer ? "" : tokenizer_misfit(tokenizer, spec.config);
    if (!misfit.empty()) config.deck.fail(key, "is '" + model_section(config, role).path + "': " + misfit);
    check_reads_actor_ids(config, spec, tokenizer);
    if (!spec.dir.empty()) {
      // The weights by the rules the build will apply, headers only: refused here, on every
      // rank alike, rather than by one group while the others wait.
      try {
        map_weights(SafetensorsCheckpoint(spec.dir), spec.config, spec.head, head_source_of(role, spec.trained));
      } catch (const Error& e) {
        config.deck.fail(key, "is '" + spec.dir + "': " + e.what());
      }
    }
    if (positions > spec.config.position_limit())
      config.deck.fail(key, "is '" + model_section(config, role).path + "', a model of " +
                                std::to_string(spec.config.position_limit()) +
                                " learned positions (n_positions), but rollout.max_prompt_tokens + "
                                "rollout.max_new_tokens = " + std::to_string(positions));
  }
}

}  // namespace quartet
