#include "quartet/rl/role_models.hpp"

#include "quartet/core/check.hpp"
#include "quartet/io/sharded_h5.hpp"

namespace quartet {

namespace {

// The seed of a role's random weights: the reference shares the actor's (it is the frozen
// initial policy); the others get their own.
std::uint64_t weight_seed(const Config& config, Role role) {
  const std::uint64_t base = config.run.seed * 7919u;
  switch (role) {
    case Role::actor:
    case Role::reference: return base + 1;
    case Role::critic: return base + 2;
    case Role::reward: return base + 3;
  }
  return base;
}

}  // namespace

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
    so.reduce_fp32 = config.train.reduce_dtype == "float32";
    ParamSource source;
    std::unique_ptr<ShardedH5Reader> saved;
    if (!resume_dir.empty() && rm->spec.trained) {
      saved = std::make_unique<ShardedH5Reader>(resume_dir + "/" + role_name(role) + ".h5", g.comm);
      source = saved->source("model");
    } else if (rm->spec.random) {
      source = source_random(rm->spec.config, weight_seed(config, role), device);
    } else {
      auto ckpt = std::make_shared<SafetensorsCheckpoint>(rm->spec.dir);
      source = source_from_checkpoint(ckpt, rm->spec.config, rm->spec.head);
    }
    // A critic started from a causal LM (or a reward model) keeps a fresh value head: the
    // checkpoint's head tensors have other shapes and names.
    if (!saved && !rm->spec.random && rm->spec.head != Head::causal_lm) {
      auto fallback = source_random(rm->spec.config, weight_seed(config, role), device);
      auto ckpt_source = source;
      auto ckpt = std::make_shared<SafetensorsCheckpoint>(rm->spec.dir);
      source = [ckpt_source, fallback, ckpt](const std::string& name, const std::vector<int64_t>& shape,
                                             int64_t begin, int64_t count) {
        const bool head = name.rfind("score.", 0) == 0 || name.rfind("classifier.", 0) == 0;
        if (head && !ckpt->has(name)) return fallback(name, shape, begin, count);
        return ckpt_source(name, shape, begin, count);
      };
    }
    rm->model = std::make_unique<ShardedModel>(rm->spec.config, rm->spec.head, *rm->group, so, source);
    if (rm->spec.trained) {
      AdamWOptions ao;
      ao.lr = sec.lr;
      ao.weight_decay = sec.weight_decay;
      ao.beta1 = config.train.adam_beta1;
      ao.beta2 = config.train.adam_beta2;
      ao.eps = config.train.adam_eps;
      ao.max_grad_norm = config.train.max_grad_norm;
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
  const ModelSpec actor = resolve_model(config, Role::actor);
  if (actor.random) return make_builtin_tokenizer();
  return load_model_tokenizer(actor.dir);
}

}  // namespace quartet
