#include "quartet/tune/rm_eval.hpp"

#include <torch/types.h>

#include <cstdio>

#include "quartet/dist/watched_mpi.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/pair_losses.hpp"
#include "quartet/tune/pair_scoring.hpp"
#include "quartet/tune/pair_stage.hpp"

namespace quartet {

RmEvaluator::RmEvaluator(const Config& config, std::vector<PreferencePair> share, int64_t pad_id, MPI_Comm world)
    : config_(config), share_(std::move(share)), pad_id_(pad_id), world_(world) {}

StageEval RmEvaluator::evaluate(RoleModel* reward, int64_t done) {
  enum { kLoss, kCorrect, kChosen, kRejected, kPairs, kSums };
  std::vector<double> sums(kSums, 0.0);
  if (reward) {
    torch::NoGradGuard no_grad;
    ShardedModel& model = *reward->model;
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(model.device());
    // Summed on the device, read back once.
    torch::Tensor on_device = torch::zeros({kPairs}, f64);
    for_each_pair_chunk(share_, config_.get<TrainConfig>().micro_batch, pad_id_, model.group(), [&](const PairBatch* batch) {
      if (!batch) {  // an empty turn: one pad token through the model
        auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
        (void)model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts));
        return;
      }
      const PairValues s = pair_scores(model, *batch);
      const PairLoss l = bradley_terry_loss(s.chosen, s.rejected, config_.get<RmConfig>().margin ? batch->margin : torch::Tensor());
      const auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
      on_device = on_device + torch::stack({d(l.per_pair.sum()), d(l.metrics.margins.gt(0).sum()),
                                            d(l.metrics.chosen.sum()), d(l.metrics.rejected.sum())});
    });
    const auto host = on_device.to(torch::kCPU);
    for (int i = 0; i < kPairs; ++i) sums[static_cast<size_t>(i)] = host[i].item<double>();
    sums[kPairs] = static_cast<double>(share_.size());
  }
  watched::allreduce(MPI_IN_PLACE, sums.data(), kSums, MPI_DOUBLE, MPI_SUM, world_, "the held-out pairs' sums");
  const double n = std::max(1.0, sums[kPairs]);
  StageEval e;
  e.metrics["loss"] = sums[kLoss] / n;
  e.metrics["accuracy"] = sums[kCorrect] / n;
  e.metrics["chosen_reward"] = sums[kChosen] / n;
  e.metrics["rejected_reward"] = sums[kRejected] / n;
  e.metrics["reward_margin"] = (sums[kChosen] - sums[kRejected]) / n;
  e.metrics["pairs"] = sums[kPairs];
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "eval step %lld | heldout loss %.4f | accuracy %.3f (%lld of %lld) | chosen %.3f | rejected %.3f | "
                "margin %.3f",
                static_cast<long long>(done), e.metrics["loss"], e.metrics["accuracy"],
                static_cast<long long>(sums[kCorrect]), static_cast<long long>(sums[kPairs]),
                e.metrics["chosen_reward"], e.metrics["rejected_reward"], e.metrics["reward_margin"]);
  e.log_line = buf;
  return e;
}

}  // namespace quartet
