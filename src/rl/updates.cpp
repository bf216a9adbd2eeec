#include "quartet/rl/updates.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
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

// Sums over the micro-batches, kept on the device and read back once at the end of the
// phase: a read-back per micro-batch would stall the host until the device caught up, and the
// device would then idle while the host queues the next work.
struct Totals {
  torch::Tensor loss, clip, approx_kl, entropy, kl;  // undefined until first added
  std::vector<torch::Tensor> norms;                  // per optimizer step
  int micro = 0;
  static void add(torch::Tensor& sum, const torch::Tensor& x) {
    auto v = x.detach().to(torch::kFloat64);
    sum = sum.defined() ? sum + v : v;
  }
  static double value(const torch::Tensor& sum) { return sum.defined() ? sum.item<double>() : 0.0; }
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
    // Drawn on the CPU (the same order on every device), then moved once: a CPU index per
    // micro-batch would be a blocking copy, which waits for all the device's queued work.
    auto perm = torch::randperm(rows, gen, torch::TensorOptions().dtype(torch::kLong)).to(model.device());
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
      t.norms.push_back(rm.optimizer->step_async(s.lr));
      ++*step;
      ++s.steps;
    }
  }
  // The phase's one read-back. A non-finite norm skipped its step (the fused kernel leaves
  // the weights alone); the run stops here, naming it.
  if (!t.norms.empty()) {
    auto norms = torch::stack(t.norms).to(torch::kCPU, torch::kFloat64);
    const auto* v = norms.data_ptr<double>();
    for (int64_t i = 0; i < norms.numel(); ++i)
      QUARTET_CHECK(std::isfinite(v[i]), "the gradient norm of '" + model.group().group_name() + "' is " +
                                             std::to_string(v[i]) + " at optimizer step " +
                                             std::to_string(*step - norms.numel() + i + 1) +
                                             ": the loss diverged (that step was skipped)");
    s.grad_norm = norms.sum().item<double>() / std::max(1, s.steps);
  }
  const double n = std::max(1, t.micro);
  s.loss = Totals::value(t.loss) / n;
  s.clip_fraction = Totals::value(t.clip) / n;
  s.approx_kl = Totals::value(t.approx_kl) / n;
  s.entropy = Totals::value(t.entropy) / n;
  s.kl_loss = Totals::value(t.kl) / n;
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
  // Everything on the device once (rollouts that came over MPI are on the CPU): per micro-batch
  // copies would each wait for the device.
  const RolloutBatch batch = on_device(tg.batch, dev);
  const auto old_logp = tg.old_logp.to(dev), advantages = tg.advantages.to(dev);
  const auto ref_logp = tg.ref_logp.defined() ? tg.ref_logp.to(dev) : torch::Tensor();
  return run_updates(actor, tg.batch.rows(), config, step, total, seed, actor.optimizer ? model_section(config, Role::actor).lr : 0,
                     [&](const torch::Tensor& index, Totals& t) -> torch::Tensor {
                       if (index.numel() == 0) return empty_turn(*actor.model);
                       RolloutBatch b = select_rows(batch, index);
                       const auto& i = index;
                       auto mask = b.action_mask.to(dev).to(torch::kFloat32);
                       torch::Tensor entropy;
                       auto logp =
                           action_logprobs(*actor.model, b, tg.view, al.entropy_coef > 0 ? &entropy : nullptr);
                       auto pl = ppo_policy_loss(logp, old_logp.index_select(0, i), advantages.index_select(0, i),
                                                 mask, al.clip_eps);
                       auto loss = pl.loss;
                       if (al.entropy_coef > 0) {
                         auto ent = masked_mean(entropy, mask);
                         loss = loss - al.entropy_coef * ent;
                         Totals::add(t.entropy, ent);
                       }
                       if (grpo && al.kl_coef > 0) {
                         auto kl = kl_loss(logp, ref_logp.index_select(0, i), mask);
                         loss = loss + al.kl_coef * kl;
                         Totals::add(t.kl, kl);
                       }
                       Totals::add(t.loss, pl.loss);
                       Totals::add(t.clip, pl.clip_fraction);
                       Totals::add(t.approx_kl, pl.approx_kl);
                       ++t.micro;
                       return loss;
                     });
}

UpdateStats update_critic(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                          const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                          uint64_t seed) {
  const auto dev = critic.model->device();
  const RolloutBatch on_dev = on_device(batch, dev);
  const auto old_v = old_values.to(dev), ret = returns.to(dev);
  return run_updates(critic, batch.rows(), config, step, total, seed, model_section(config, Role::critic).lr,
                     [&](const torch::Tensor& index, Totals& t) -> torch::Tensor {
                       if (index.numel() == 0) return empty_turn(*critic.model);
                       RolloutBatch b = select_rows(on_dev, index);
                       const auto& i = index;
                       auto mask = b.action_mask.to(torch::kFloat32);
                       auto values = action_values(*critic.model, b);
                       auto vl = ppo_value_loss(values, old_v.index_select(0, i), ret.index_select(0, i), mask,
                                                config.algorithm.value_clip);
                       Totals::add(t.loss, vl.loss);
                       Totals::add(t.clip, vl.clip_fraction);
                       ++t.micro;
                       return vl.loss;
                     });
}

}  // namespace quartet
