#include "quartet/rl/updates.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "quartet/core/check.hpp"
#include "quartet/engine/lr_schedule.hpp"
#include "quartet/engine/packed_rollouts.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/losses.hpp"
#include "quartet/shard/step_graph.hpp"

namespace quartet {

int64_t steps_per_iteration(const Config& config, int64_t rows) {
  const int64_t mb = config.get<AlgorithmConfig>().minibatch;
  return config.get<AlgorithmConfig>().epochs * std::max<int64_t>(1, (rows + mb - 1) / mb);
}

namespace {

// A micro-batch's results, as StepGraph::MicroBatch returns them: the loss to back-propagate,
// then the statistics summed over the phase (undefined where the algorithm has none).
enum Slot { kLoss, kReportedLoss, kClip, kApproxKl, kEntropy, kKl, kDualClip, kSlots };

// A source the phase computes anew each epoch from the epoch's row order (perm), the minibatch
// size, the minibatch count and the micro-batches per minibatch; it takes the last source slot.
using EpochSource = std::function<torch::Tensor(const torch::Tensor& perm, int64_t minibatch, int64_t minibatches,
                                                int64_t micros)>;

// Sums over the micro-batches, kept on the device and read back once at the end of the
// phase: a read-back per micro-batch would stall the host until the device caught up, and the
// device would then idle while the host queues the next work.
struct Totals {
  std::vector<torch::Tensor> sums = std::vector<torch::Tensor>(kSlots);  // undefined until first added
  std::vector<torch::Tensor> norms;                                      // per optimizer step
  int micro = 0;  // micro-batches with rows
  int turns = 0;  // micro-batches, padding turns included
  void add(const std::vector<torch::Tensor>& out) {
    for (int k = kReportedLoss; k < kSlots && k < static_cast<int>(out.size()); ++k) {
      if (!out[k].defined()) continue;
      auto v = out[k].detach().to(torch::kFloat64);
      sums[k] = sums[k].defined() ? sums[k] + v : v;
    }
    ++micro;
  }
  double value(Slot k) const { return sums[k].defined() ? sums[k].item<double>() : 0.0; }
};

// Each minibatch's micro-batches as ranges [a, b) of the epoch's row order (perm, on the host),
// the same count for every minibatch and rank (an empty range is a padding turn): `micro` rows
// each, or, with token lengths, consecutive rows of at most `budget` tokens (a longer row alone).
using MicroRanges = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
MicroRanges micro_ranges(const torch::Tensor& perm_cpu, int64_t rows, int64_t mb, int64_t minibatches, int64_t micro,
                         const std::vector<int64_t>* lengths, int64_t budget, Collectives& group) {
  MicroRanges plan(static_cast<size_t>(minibatches));
  int64_t micros = (mb + micro - 1) / micro;
  if (lengths) {
    const int64_t* order = perm_cpu.data_ptr<int64_t>();
    int64_t most = 1;
    for (int64_t k = 0; k < minibatches; ++k) {
      const int64_t lo = std::min(rows, k * mb), hi = std::min(rows, (k + 1) * mb);
      std::vector<int64_t> step_lengths;
      for (int64_t i = lo; i < hi; ++i) step_lengths.push_back((*lengths)[static_cast<size_t>(order[i])]);
      for (auto [a, b] : token_passes(step_lengths, budget)) plan[static_cast<size_t>(k)].emplace_back(lo + a, lo + b);
      most = std::max<int64_t>(most, static_cast<int64_t>(plan[static_cast<size_t>(k)].size()));
    }
    micros = group_max(group, most);
  } else {
    for (int64_t k = 0; k < minibatches; ++k) {
      const int64_t lo = std::min(rows, k * mb), hi = std::min(rows, (k + 1) * mb);
      for (int64_t m = 0; m < micros; ++m)
        plan[static_cast<size_t>(k)].emplace_back(std::min(hi, lo + m * micro), std::min(hi, lo + (m + 1) * micro));
    }
  }
  for (auto& ranges : plan)
    while (static_cast<int64_t>(ranges.size()) < micros) ranges.emplace_back(0, 0);
  return plan;
}

// How a phase's micro-batch reports its loss: as the mean over its own rows (the critic's value
// loss), or as its share of the optimizer step's loss, the step's micro-batches adding up to it
// (the policy loss and its KL term, aggregated over the step: losses.hpp LossAggregation). The
// phase's loss is then the mean over the micro-batches with rows, or the step losses' mean
// (a padding turn's share is 0, and it counts among the step's micro-batches).
enum class ReportedLoss { per_micro_batch, share_of_step };

// The shared loop. micro_batch(sources, rows) returns the micro-batch's results (Slot order)
// from the phase's `sources` (which it must read through its argument: a CUDA graph replays
// it on copies of them); it is given an empty index for a padding turn. `variant` names the
// host-side choices micro_batch makes for this phase (StepGraph::begin_phase). lengths: each
// row's tokens, for micro-batches packed by train.micro_batch_tokens (null: by rows).
UpdateStats run_updates(RoleModel& rm, int64_t rows, const Config& config, int64_t* step, int64_t total,
                        uint64_t seed, double base_lr, std::vector<torch::Tensor> sources, int64_t variant,
                        const StepGraph::MicroBatch& micro_batch, ReportedLoss reported,
                        const EpochSource& per_epoch = nullptr, const std::vector<int64_t>* lengths = nullptr) {
  ShardedModel& model = *rm.model;
  const int64_t mb = config.get<AlgorithmConfig>().minibatch, micro = std::min<int64_t>(config.get<TrainConfig>().micro_batch, mb);
  const int64_t agreed = group_max(model.group(), rows);
  const int64_t minibatches = std::max<int64_t>(1, (agreed + mb - 1) / mb);
  // On a one-rank GPU model the micro-batches of `micro` rows run as CUDA graphs (step_graph.hpp).
  StepGraph* graph = nullptr;
  if (config.get<TrainConfig>().cuda_graphs && !lengths && StepGraph::applies(model)) {
    if (!rm.step_graph) rm.step_graph = std::make_unique<StepGraph>(model);
    graph = rm.step_graph.get();
    if (!per_epoch) graph->begin_phase(sources, variant);
  }
  Totals t;
  UpdateStats s;
  for (int epoch = 0; epoch < config.get<AlgorithmConfig>().epochs; ++epoch) {
    auto gen = at::detail::createCPUGenerator(seed * 1315423911u + static_cast<uint64_t>(epoch));
    // Drawn on the CPU (the same order on every device), then moved once: a CPU index per
    // micro-batch would be a blocking copy, which waits for all the device's queued work.
    auto perm_cpu = torch::randperm(rows, gen, torch::TensorOptions().dtype(torch::kLong));
    auto perm = perm_cpu.to(model.device());
    const MicroRanges plan = micro_ranges(perm_cpu, rows, mb, minibatches, micro, lengths,
                                          config.get<TrainConfig>().micro_batch_tokens, model.group());
    const auto micros = static_cast<int64_t>(plan.front().size());
    if (per_epoch) {
      sources.back() = per_epoch(perm, mb, minibatches, micros);
      if (graph) graph->begin_phase(sources, variant);  // the graphs copy the sources again
    }
    for (int64_t k = 0; k < minibatches; ++k) {
      model.zero_grad();
      for (auto [a, b] : plan[static_cast<size_t>(k)]) {
        ++t.turns;
        auto index = perm.narrow(0, a, b - a);
        if (graph && index.numel() == micro) {
          t.add(graph->step(index, micro_batch, micros));
          continue;
        }
        auto out = micro_batch(sources, index);
        model.backward(out[kLoss] / static_cast<double>(micros));
        if (index.numel() > 0) t.add(out);
      }
      s.lr = learning_rate(static_cast<int>(*step), static_cast<int>(total), config.get<TrainConfig>().warmup, base_lr,
                           config.get<TrainConfig>().schedule, config.get<TrainConfig>().min_lr_ratio);
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
  const double per_loss = reported == ReportedLoss::share_of_step ? std::max(1, t.turns) : n;
  s.loss = t.value(kReportedLoss) / per_loss;
  s.clip_fraction = t.value(kClip) / n;
  s.dual_clip_fraction = t.value(kDualClip) / n;
  s.approx_kl = t.value(kApproxKl) / n;
  s.entropy = t.value(kEntropy) / n;
  s.kl_loss = t.value(kKl) / per_loss;
  return s;
}

// One pad token through the model with grad, its output times zero: a padding turn.
std::vector<torch::Tensor> empty_turn(ShardedModel& model) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
  std::vector<torch::Tensor> out(kSlots);
  out[kLoss] = model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts)).sum() * 0.0;
  return out;
}

// Each row's step denominator for this epoch's order (losses.hpp LossAggregation): the
// aggregation's count over the step's rows on every rank of the group, divided by the group's
// size (its gradients are averaged over the ranks) and by the step's micro-batches (each one's
// backward is divided by their number). One all-reduce per epoch.
torch::Tensor step_denominators(const torch::Tensor& weights, const torch::Tensor& perm, int64_t minibatch,
                                int64_t minibatches, int64_t micros, Collectives& group) {
  const int64_t rows = perm.numel();
  auto step_of = torch::arange(rows, perm.options()).div(minibatch, "floor");
  auto counts = torch::zeros({minibatches}, weights.options().dtype(torch::kFloat64));
  counts.index_add_(0, step_of, weights.index_select(0, perm).to(torch::kFloat64));
  auto on_group = counts.to(group.device());
  group.all_reduce(on_group, ReduceOp::sum);
  // At least 1: a step without a token anywhere adds 0 / 1.
  auto den = (on_group.to(counts.device()).clamp_min(1.0) / static_cast<double>(group.size() * micros))
                 .to(torch::kFloat32);
  auto out = torch::empty({rows}, den.options());
  out.index_copy_(0, perm, den.index_select(0, step_of));
  return out;
}

// The phase's sources of the policy update, by slot.
enum PolicySource {
  kSourceSeq, kSourceAttn, kSourceActions, kSourceOldLogp, kSourceAdvantages, kSourceRefLogp, kSourceLossMask,
  kSourceDenominator, kPolicySources
};

// The policy's loss on one micro-batch (rows `i` of the phase's sources, PolicySource), and its
// statistics in Slot order. Every term of the policy loss is formed here, each aggregated over
// the optimizer step (LossAggregation) as the policy-gradient term is.
std::vector<torch::Tensor> policy_micro_batch(RoleModel& actor, const AlgorithmConfig& al, double agg_norm,
                                              bool kl_loss_term, const SamplingView& view, PaddingLayout padding,
                                              bool packed, const std::vector<torch::Tensor>& src, const torch::Tensor& i) {
  if (i.numel() == 0) return empty_turn(*actor.model);
  const RolloutBatch b = select_rows(RolloutBatch{src[kSourceSeq], src[kSourceAttn], src[kSourceActions]}, i);
  auto mask = src[kSourceLossMask].index_select(0, i).to(torch::kFloat32);
  LossAggregation agg{al.loss_agg_mode, agg_norm, src[kSourceDenominator].index_select(0, i).narrow(0, 0, 1).reshape({})};
  PolicyLossOptions options{al.policy_loss, al.clip_low, al.clip_high, al.clip_ratio_c};
  std::vector<torch::Tensor> out(kSlots);
  torch::Tensor entropy;
  auto logp = packed ? action_logprobs_packed(*actor.model, b, view, &entropy)
                     : action_logprobs(*actor.model, b, view, &entropy, padding);
  auto pl = policy_loss(logp, src[kSourceOldLogp].index_select(0, i), src[kSourceAdvantages].index_select(0, i), mask, options, agg);
  auto loss = pl.loss;
  // The entropy is logged either way (a softmax over the logits the log-probs came from); it
  // is a loss term, with its gradient, only with a coefficient.
  out[kEntropy] = masked_mean(entropy.detach(), mask);
  if (al.entropy_coef > 0) loss = loss - al.entropy_coef * aggregate_loss(entropy, mask, agg);
  if (kl_loss_term) {
    out[kKl] = kl_loss(logp, src[kSourceRefLogp].index_select(0, i), mask, al.kl_loss_estimator, agg);
    loss = loss + al.kl_coef * out[kKl];
  }
  out[kLoss] = loss;
  out[kReportedLoss] = pl.loss;
  out[kClip] = pl.clip_fraction;
  out[kApproxKl] = pl.approx_kl;
  if (al.clip_ratio_c > 0) out[kDualClip] = pl.dual_clip_fraction;
  return out;
}

}  // namespace

UpdateStats update_policy(RoleModel& actor, const PolicyTargets& tg, const Config& config, int64_t* step,
                          int64_t total, uint64_t seed) {
  const AlgorithmConfig& al = config.get<AlgorithmConfig>();
  const bool kl_loss_term = algorithm_spec(al.algorithm).kl == KlUse::loss && al.kl_coef > 0;
  const auto dev = actor.model->device();
  // Everything on the device once (rollouts that came over MPI are on the CPU): per micro-batch
  // copies would each wait for the device.
  const RolloutBatch batch = on_device(tg.batch, dev);
  const torch::Tensor loss_mask = tg.loss_mask.defined() ? tg.loss_mask.to(dev) : batch.action_mask;
  std::vector<torch::Tensor> sources(kPolicySources);
  sources[kSourceSeq] = batch.sequences;
  sources[kSourceAttn] = batch.attention_mask;
  sources[kSourceActions] = batch.action_mask;
  sources[kSourceOldLogp] = tg.old_logp.to(dev);
  sources[kSourceAdvantages] = tg.advantages.to(dev);
  if (kl_loss_term) sources[kSourceRefLogp] = tg.ref_logp.to(dev);
  sources[kSourceLossMask] = loss_mask;
  const torch::Tensor weights = aggregation_weights(loss_mask, al.loss_agg_mode);
  Collectives& group = actor.model->group();
  const SamplingView view = tg.view;
  const PaddingLayout padding = padding_layout(tg.batch);  // per phase: a read-back where on a device
  const double agg_norm = al.loss_agg_norm > 0 ? al.loss_agg_norm : config.get<RolloutConfig>().max_new_tokens;
  const bool packed = config.get<TrainConfig>().micro_batch_tokens > 0;
  const std::vector<int64_t> lengths = packed ? row_lengths(batch) : std::vector<int64_t>();
  return run_updates(
      actor, tg.batch.rows(), config, step, total, seed, actor.optimizer ? model_section(config, Role::actor).lr : 0,
      std::move(sources), static_cast<int64_t>(padding),
      [&actor, &al, agg_norm, kl_loss_term, view, padding, packed](const std::vector<torch::Tensor>& src,
                                                                   const torch::Tensor& i) {
        return policy_micro_batch(actor, al, agg_norm, kl_loss_term, view, padding, packed, src, i);
      },
      ReportedLoss::share_of_step,
      [&weights, &group](const torch::Tensor& perm, int64_t minibatch, int64_t minibatches, int64_t micros) {
        return step_denominators(weights, perm, minibatch, minibatches, micros, group);
      },
      packed ? &lengths : nullptr);
}

UpdateStats update_critic(RoleModel& critic, const RolloutBatch& batch, const torch::Tensor& old_values,
                          const torch::Tensor& returns, const Config& config, int64_t* step, int64_t total,
                          uint64_t seed) {
  const auto dev = critic.model->device();
  const RolloutBatch on_dev = on_device(batch, dev);
  std::vector<torch::Tensor> sources{on_dev.sequences, on_dev.attention_mask, on_dev.action_mask,
                                     old_values.to(dev), returns.to(dev)};
  const double value_clip = config.get<AlgorithmConfig>().value_clip, value_coef = config.get<AlgorithmConfig>().value_coef;
  const PaddingLayout padding = padding_layout(batch);
  const bool packed = config.get<TrainConfig>().micro_batch_tokens > 0;
  const std::vector<int64_t> lengths = packed ? row_lengths(on_dev) : std::vector<int64_t>();
  return run_updates(critic, batch.rows(), config, step, total, seed, model_section(config, Role::critic).lr,
                     std::move(sources), static_cast<int64_t>(padding),
                     [&critic, value_clip, value_coef, padding, packed](const std::vector<torch::Tensor>& src,
                                                                        const torch::Tensor& i) {
                       if (i.numel() == 0) return empty_turn(*critic.model);
                       const RolloutBatch b = select_rows(RolloutBatch{src[0], src[1], src[2]}, i);
                       auto mask = b.action_mask.to(torch::kFloat32);
                       auto values = packed ? action_values_packed(*critic.model, b) : action_values(*critic.model, b, padding);
                       auto vl = ppo_value_loss(values, src[3].index_select(0, i), src[4].index_select(0, i), mask,
                                                value_clip);
                       std::vector<torch::Tensor> out(kSlots);
                       out[kLoss] = value_coef == 1.0 ? vl.loss : vl.loss * value_coef;
                       out[kReportedLoss] = vl.loss;
                       out[kClip] = vl.clip_fraction;
                       return out;
                     },
                     ReportedLoss::per_micro_batch, nullptr, packed ? &lengths : nullptr);
}

}  // namespace quartet
