#include "quartet/tune/dpo_eval.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cstdio>

#include "quartet/dist/watched_mpi.hpp"
#include "quartet/tune/pair_scoring.hpp"

namespace quartet {

std::vector<std::string> dpo_statistic_names() {
  return {"reward_accuracy", "chosen_reward", "rejected_reward", "reward_margin", "chosen_logp", "rejected_logp"};
}

std::vector<torch::Tensor> dpo_statistic_sums(const PairLoss& l, const PairLogps& logps) {
  const PairMetrics& m = l.metrics;
  return {m.margins.gt(0).to(torch::kFloat32).sum(), m.chosen.sum(), m.rejected.sum(), m.margins.sum(),
          logps.policy_chosen.detach().sum(), logps.policy_rejected.detach().sum()};
}

DpoEvaluator::DpoEvaluator(const PairDataset& pairs, int64_t count, ReferenceLogps reference,
                           const PairScoring& scoring, const DpoOptions& options, MPI_Comm world)
    : pairs_(pairs), count_(count), reference_(std::move(reference)), scoring_(scoring), options_(options),
      world_(world) {}

StageEval DpoEvaluator::evaluate(RoleModel* actor, int64_t done) {
  const std::vector<std::string> names = dpo_statistic_names();
  std::vector<double> sums(names.size() + 2, 0.0);  // loss, the statistics, pairs
  if (actor) {
    torch::NoGradGuard no_grad;
    ShardedModel& model = *actor->model;
    Collectives& group = model.group();
    const auto chunks = strided_chunks(count_, scoring_.pairs_per_pass, group.rank(), group.size());
    const int64_t mine = static_cast<int64_t>(chunks.size()), turns = group_max(group, mine);
    std::vector<torch::Tensor> on_device;
    for (int64_t k = 0; k < turns; ++k) {
      if (k >= mine) {
        idle_scoring(model, scoring_.view);
        continue;
      }
      const StageMicroBatch mb = pair_micro_batch(pairs_, chunks[static_cast<size_t>(k)], scoring_.pad_id,
                                                  scoring_.max_width, reference_, model.device());
      const PairValues policy = score_pair_logps(model, dpo_batch_of(mb), 2 * static_cast<int64_t>(mb.units),
                                                 scoring_.view, scoring_.kind);
      const auto [ref_chosen, ref_rejected] = reference_of(mb);
      const PairLogps logps{policy.chosen, policy.rejected, ref_chosen, ref_rejected};
      const PairLoss l = dpo_loss(logps, options_);
      std::vector<torch::Tensor> now{l.per_pair.sum()};
      for (const torch::Tensor& s : dpo_statistic_sums(l, logps)) now.push_back(s);
      for (size_t i = 0; i < now.size(); ++i) now[i] = now[i].to(torch::kFloat64);
      if (on_device.empty()) on_device = now;
      else for (size_t i = 0; i < now.size(); ++i) on_device[i] = on_device[i] + now[i];
      sums.back() += mb.units;
    }
    if (!on_device.empty()) {
      const auto host = torch::stack(on_device).to(torch::kCPU).contiguous();
      for (size_t i = 0; i < on_device.size(); ++i) sums[i] = host.data_ptr<double>()[i];
    }
  }
  watched::allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, world_,
                     "the held-out pairs' sums");
  const double pairs = std::max(1.0, sums.back());
  StageEval e;
  e.metrics["loss"] = sums[0] / pairs;
  for (size_t i = 0; i < names.size(); ++i) e.metrics[names[i]] = sums[i + 1] / pairs;
  e.metrics["pairs"] = sums.back();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "eval step %lld | heldout loss %.4f | reward_accuracy %.3f | chosen_reward %.3f | rejected_reward %.3f "
                "| reward_margin %.3f (%lld pairs)",
                static_cast<long long>(done), e.metrics["loss"], e.metrics["reward_accuracy"], e.metrics["chosen_reward"],
                e.metrics["rejected_reward"], e.metrics["reward_margin"], static_cast<long long>(sums.back()));
  e.log_line = buf;
  return e;
}

}  // namespace quartet
