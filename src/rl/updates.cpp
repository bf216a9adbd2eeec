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

// One model's updates: its optimizer steps in order, a minibatch each. loss_of(rows) returns a
// micro-batch's loss (with grad) and adds its statistics to the totals; it is given an empty
// index for a padding turn.
class Updates {
 public:
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
  using LossFn = std::function<torch::Tensor(const torch::Tensor& index, Totals& t)>;
  Updates(RoleModel& rm, int64_t rows, const Config& config, int64_t* step, int64_t total, uint64_t seed,
          double base_lr, LossFn loss_of)
      : rm_(rm), config_(config), step_(step), total_(total), seed_(seed), base_lr_(base_lr), rows_(rows),
        loss_of_(std::move(loss_of)) {
    ShardedModel& model = *rm.model;
    mb_ = config.algorithm.minibatch;
    micro_ = std::min<int64_t>(config.train.micro_batch, mb_);
    const int64_t agreed = group_max(model.group(), rows);
    minibatches_ = std::max<int64_t>(1, (agreed + mb_ - 1) / mb_);
    micros_ = (mb_ + micro_ - 1) / micro_;
  }

  bool done() const { return epoch_ >= config_.algorithm.epochs; }

  // The next optimizer step: the minibatch's micro-batches forward and backward, then the step,
  // queued on `side` where given (this model's next step waits for it, not the host).
  void next(SideStream* side) {
    ShardedModel& model = *rm_.model;
    optimizer_done_.wait();  // the weights and gradients the last step wrote or read
    if (k_ == 0) {
      auto gen = at::detail::createCPUGenerator(seed_ * 1315423911u + static_cast<uint64_t>(epoch_));
      // Drawn on the CPU (the same order on every device), then moved once: a CPU index per
      // micro-batch would be a blocking copy, which waits for all the device's queued work.
      perm_ = torch::randperm(rows_, gen, torch::TensorOptions().dtype(torch::kLong)).to(model.device());
    }
    model.zero_grad();
    const int64_t lo = std::min(rows_, k_ * mb_), hi = std::min(rows_, (k_ + 1) * mb_);
    for (int64_t m = 0; m < micros_; ++m) {
      const int64_t a = std::min(hi, lo + m * micro_), b = std::min(hi, lo + (m + 1) * micro_);
      auto index = perm_.narrow(0, a, b - a);
      auto loss = loss_of_(index, t_) / static_cast<double>(micros_);
      model.backward(loss);
    }
    s_.lr = learning_rate(static_cast<int>(*step_), static_cast<int>(total_), config_.train.warmup, base_lr_,
                          config_.train.schedule, config_.train.min_lr_ratio);
    const double lr = s_.lr;
    auto step = [&] { t_.norms.push_back(rm_.optimizer->step_async(lr)); };
    if (side) optimizer_done_ = side->run(step);
    else step();
    ++*step_;
    ++s_.steps;
    if (++k_ == minibatches_) {
      k_ = 0;
      ++epoch_;
    }
  }

  // The updates' one read-back. A non-finite norm skipped its step (the fused kernel leaves
  // the weights alone); the run stops here, naming it.
  UpdateStats finish() {
    optimizer_done_.wait();
    ShardedModel& model = *rm_.model;
    if (!t_.norms.empty()) {
      // Synchronous: the host has the norms before the side stream's tensors are freed.
      auto norms = torch::stack(t_.norms).to(torch::kCPU, torch::kFloat64);
      const auto* v = norms.data_ptr<double>();
      for (int64_t i = 0; i < norms.numel(); ++i)
        QUARTET_CHECK(std::isfinite(v[i]), "the gradient norm of '" + model.group().group_name() + "' is " +
                                               std::to_string(v[i]) + " at optimizer step " +
                                               std::to_string(*step_ - norms.numel() + i + 1) +
                                               ": the loss diverged (that step was skipped)");
      s_.grad_norm = norms.sum().item<double>() / std::max(1, s_.steps);
      t_.norms.clear();
    }
    const double n = std::max(1, t_.micro);
    s_.loss = Totals::value(t_.loss) / n;
    s_.clip_fraction = Totals::value(t_.clip) / n;
    s_.approx_kl = Totals::value(t_.approx_kl) / n;
    s_.entropy = Totals::value(t_.entropy) / n;
    s_.kl_loss = Totals::value(t_.kl) / n;
    return s_;
  }

 private:
  RoleModel& rm_;
  const Config& config_;
  int64_t* step_;
  int64_t total_;
  uint64_t seed_;
  double base_lr_;
  int64_t rows_, mb_ = 1, micro_ = 1, minibatches_ = 1, micros_ = 1;
  LossFn loss_of_;
  int epoch_ = 0;
  int64_t k_ = 0;  // the minibatch within the epoch
  torch::Tensor perm_;
  Totals t_;
  UpdateStats s_;
  Fence optimizer_done_;
};

void UpdatesDeleter::operator()(Updates* u) const { delete u; }

namespace {

// One pad token through the model with grad, its output times zero: a padding turn.
torch::Tensor empty_turn(ShardedModel& model) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
  return model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts)).sum() * 0.0;
}

}  // namespace

UpdatesPtr policy_updates(RoleModel& actor, const PolicyTargets& tg, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed) {
  const AlgorithmConfig& al = config.algorithm;
  const bool grpo = al.name == "grpo";
  const auto dev = actor.model->device();
  // Everything on the device once (rollouts that came over MPI are on the CPU): per micro-batch
  // copies would each wait for the device.
  const RolloutBatch batch = on_device(tg.batch, dev);
  const auto old_logp = tg.old_logp.to(dev), advantages = tg.advantages.to(dev);
  const auto ref_logp = tg.ref_logp.defined() ? tg.ref_logp.to(dev) : torch::Tensor();
  const SamplingView view = tg.view;
  ShardedModel* model = actor.model.get();
  auto loss_of = [=, &al](const torch::Tensor& index, Updates::Totals& t) -> torch::Tensor {
    if (index.numel() == 0) return empty_turn(*model);
    RolloutBatch b = select_rows(batch, index);
    const auto& i = index;
    auto mask = b.action_mask.to(dev).to(torch::kFloat32);
    torch::Tensor entropy;
    auto logp = action_logprobs(*model, b, view, al.entropy_coef > 0 ? &entropy : nullptr);
    auto pl = ppo_policy_loss(logp, old_logp.index_select(0, i), advantages.index_select(0, i), mask, al.clip_eps);
    auto loss = pl.loss;
    if (al.entropy_coef > 0) {
      auto ent = masked_mean(entropy, mask);
      loss = loss - al.entropy_coef * ent;
      Updates::Totals::add(t.entropy, ent);
    }
    if (grpo && al.kl_coef > 0) {
      auto kl = kl_loss(logp, ref_logp.index_select(0, i), mask);
      loss = loss + al.kl_coef * kl;
      Updates::Totals::add(t.kl, kl);
    }
    Updates::Totals::add(t.loss, pl.loss);
    Updates::Totals::add(t.clip, pl.clip_fraction);
    Updates::Totals::add(t.approx_kl, pl.approx_kl);
    ++t.micro;
    return loss;
  };
  return UpdatesPtr(new Updates(actor, tg.batch.rows(), config, step, total, seed,
                                actor.optimizer ? model_section(config, Role::actor).lr : 0, loss_of));
}

UpdatesPtr value_updates(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                         const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                         uint64_t seed) {
  const auto dev = critic.model->device();
  const RolloutBatch on_dev = on_device(batch, dev);
  const auto old_v = old_values.to(dev), ret = returns.to(dev);
  const double value_clip = config.algorithm.value_clip;
  ShardedModel* model = critic.model.get();
  auto loss_of = [=](const torch::Tensor& index, Updates::Totals& t) -> torch::Tensor {
    if (index.numel() == 0) return empty_turn(*model);
    RolloutBatch b = select_rows(on_dev, index);
    const auto& i = index;
    auto mask = b.action_mask.to(torch::kFloat32);
    auto values = action_values(*model, b);
    auto vl = ppo_value_loss(values, old_v.index_select(0, i), ret.index_select(0, i), mask, value_clip);
    Updates::Totals::add(t.loss, vl.loss);
    Updates::Totals::add(t.clip, vl.clip_fraction);
    ++t.micro;
    return vl.loss;
  };
  return UpdatesPtr(new Updates(critic, batch.rows(), config, step, total, seed,
                                model_section(config, Role::critic).lr, loss_of));
}

std::vector<UpdateStats> run_in_turns(const std::vector<Updates*>& updates, SideStream* side) {
  // Turn by turn while any model has steps left: A's step k, B's step k, A's step k + 1, ...
  // With a side stream, A's optimizer step runs there while B's forward and backward fill the
  // compute stream (and the gaps where it waits for the host's launches).
  std::vector<UpdateStats> stats;
  auto turns = [&] {
    for (bool any = true; any;) {
      any = false;
      for (Updates* u : updates)
        if (!u->done()) {
          u->next(side);
          any = true;
        }
    }
    for (Updates* u : updates) stats.push_back(u->finish());
  };
  if (side) side->prioritized(turns);
  else turns();
  return stats;
}

UpdateStats update_policy(RoleModel& actor, const PolicyTargets& targets, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed) {
  auto u = policy_updates(actor, targets, config, step, total, seed);
  return run_in_turns({u.get()}, nullptr).front();
}

UpdateStats update_critic(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                          const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                          uint64_t seed) {
  auto u = value_updates(critic, batch, old_values, returns, config, step, total, seed);
  return run_in_turns({u.get()}, nullptr).front();
}

}  // namespace quartet
