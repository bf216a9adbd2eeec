#pragma once
// One step of a supervised stage over the whole world (tune/stage.hpp): what its log line prints
// and run.h5's /metrics stores. Each rank adds its micro-batches' sums; reduce() makes them the
// world's. Stored per step (names fixed, postprocess reads them):
//   loss            the step's loss: the summed loss over every rank's units (sft: target tokens)
//                   divided by their number
//   <statistic>     each of the objective's statistics, a mean over the same units (sft: accuracy)
//   units, tokens   units of the loss and tokens through the model, over every rank
//   lr, grad_norm   the optimizer step's learning rate and gradient norm (before clipping)
//   tokens_per_s    tokens / the step's training seconds (its evaluation left out)
//   time_step       the step's seconds (the slowest rank's), evaluation included
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

namespace quartet {

struct StageStepMetrics {
  explicit StageStepMetrics(std::vector<std::string> statistics = {})
      : stat_names(std::move(statistics)), stat_sums(stat_names.size(), 0.0) {}
  // Summed over the world.
  double loss_sum = 0, units = 0, tokens = 0;
  std::vector<std::string> stat_names;
  std::vector<double> stat_sums;
  // The same on every rank of the trained group (the largest over the world is kept).
  double lr = 0, grad_norm = 0;
  double step_seconds = 0;   // the slowest rank's
  double train_seconds = 0;  // the slowest rank's, without the evaluation

  // Collective over the world.
  void reduce(MPI_Comm world);
  double loss() const;
  std::map<std::string, double> named() const;
  // "step   25/200 | loss 1.2345 | accuracy 0.512 | lr 3.00e-03 | grad 0.870 | 12.3k tok/s | 0.10s/step | eta 1m05s"
  std::string log_line(long long step, long long steps, double eta_seconds) const;
};

}  // namespace quartet
