#include "quartet/rl/updates.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "quartet/core/check.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/losses.hpp"
#include "quartet/rl/lr_schedule.hpp"

namespace quartet {

int64_t steps_per_iteration(const Config& config, int64_t rows) {
  const int64_t mb = config.algorithm.minibatch;
  return config.algorithm.epochs * std::max<int64_t>(1, (rows + mb - 1) / mb);
}

namespace {

struct Totals {
  double loss = 0, clip = 0, approx_kl = 0, entropy = 0, kl = 0, norm = 0;
  int micro = 0;
};

// The shared loop. loss_of(rows) returns the micro-batch's loss (with grad) and adds its
// statistics to the totals; it is given an empty index for a padding turn.
UpdateStats run_updates(RoleModel& rm, int64_t rows, const Config& config, int64_t* step, int64_t total,
                        uint64_t seed, double base_lr,
                        const std::function<torch::Tensor(const torch::Tensor& index, Totals& t)>& loss_of) {
  ShardedModel& model = *rm.model;
  const int64_t mb = config.algorithm.minibatch, micro = std::min<int64_t>(config.train.micro_batch, mb);
  const int64_t agreed = group_max(model.group(), rows);
  const int64_t minibatches = std::max<int64_t>(1, (agreed + mb - 1) / mb);
  const int64_t micros = (mb + micro - 1) / micro;
  Totals t;
  UpdateStats s;
  for (int epoch = 0; epoch < config.algorithm.epochs; ++epoch) {
    auto gen = at::detail::createCPUGenerator(seed * 1315423911u + static_cast<uint64_t>(epoch));
    auto perm = torch::randperm(rows, gen, torch::TensorOptions().dtype(torch::kLong));
    for (int64_t k = 0; k < minibatches; ++k) {
      model.zero_grad();
      const int64_t lo = std::min(rows, k * mb), hi = std::min(rows, (k + 1) * mb);
      for (int64_t m = 0; m < micros; ++m) {
        const int64_t a = std::min(hi, lo + m * micro), b = std::min(hi, lo + (m + 1) * micro);
        auto index = perm.narrow(0, a, b - a);
        auto loss = loss_of(index, t) / static_cast<double>(micros);
        model.backward(loss);
      }
      s.lr = learning_rate(static_cast<int>(*step), static_cast<int>(total), config.train.warmup, base_lr,
                           config.train.schedule, config.train.min_lr_ratio);
      t.norm += rm.optimizer->step(s.lr);
      ++*step;
      ++s.steps;
    }
  }
  const double n = std::max(1, t.micro);
  s.loss = t.loss / n;
  s.clip_fraction = t.clip / n;
  s.approx_kl = t.approx_kl / n;
  s.entropy = t.entropy / n;
  s.kl_loss = t.kl / n;
  s.grad_norm = t.norm / std::max(1, s.steps);
  return s;
}

// One pad token through the model with grad, its output times zero: a padding turn.
torch::Tensor empty_turn(ShardedModel& model) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
  return model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts)).sum() * 0.0;
}

}  // namespace

UpdateStats update_policy(RoleModel& actor, const PolicyTargets& tg, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed) {
  const AlgorithmConfig& al = config.algorithm;
  const bool grpo = al.name == "grpo";
  const auto dev = actor.model->device();
  return run_updates(actor, tg.batch.rows(), config, step, total, seed, actor.optimizer ? model_section(config, Role::actor).lr : 0,
                     [&](const torch::Tensor& index, Totals& t) -> torch::Tensor {
                       if (index.numel() == 0) return empty_turn(*actor.model);
                       RolloutBatch b = select_rows(tg.batch, index);
                       auto i = index.to(dev);
                       auto mask = b.action_mask.to(dev).to(torch::kFloat32);
                       torch::Tensor entropy;
                       auto logp = action_logprobs(*actor.model, b, al.entropy_coef > 0 ? &entropy : nullptr);
                       auto pl = ppo_policy_loss(logp, tg.old_logp.to(dev).index_select(0, i),
                                                 tg.advantages.to(dev).index_select(0, i), mask, al.clip_eps);
                       auto loss = pl.loss;
                       if (al.entropy_coef > 0) {
                         auto ent = masked_mean(entropy, mask);
                         loss = loss - al.entropy_coef * ent;
                         t.entropy += ent.item<double>();
                       }
                       if (grpo && al.kl_coef > 0) {
                         auto kl = kl_loss(logp, tg.ref_logp.to(dev).index_select(0, i), mask);
                         loss = loss + al.kl_coef * kl;
                         t.kl += kl.item<double>();
                       }
                       t.loss += pl.loss.item<double>();
                       t.clip += pl.clip_fraction.item<double>();
                       t.approx_kl += pl.approx_kl.item<double>();
                       ++t.micro;
                       return loss;
                     });
}

UpdateStats update_critic(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                          const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                          uint64_t seed) {
  const auto dev = critic.model->device();
  return run_updates(critic, batch.rows(), config, step, total, seed, model_section(config, Role::critic).lr,
                     [&](const torch::Tensor& index, Totals& t) -> torch::Tensor {
                       if (index.numel() == 0) return empty_turn(*critic.model);
                       RolloutBatch b = select_rows(batch, index);
                       auto i = index.to(dev);
                       auto mask = b.action_mask.to(dev).to(torch::kFloat32);
                       auto values = action_values(*critic.model, b);
                       auto vl = ppo_value_loss(values, old_values.to(dev).index_select(0, i),
                                                returns.to(dev).index_select(0, i), mask, config.algorithm.value_clip);
                       t.loss += vl.loss.item<double>();
                       t.clip += vl.clip_fraction.item<double>();
                       ++t.micro;
                       return vl.loss;
                     });
}

}  // namespace quartet
