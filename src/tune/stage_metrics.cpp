#include "quartet/tune/stage_metrics.hpp"

#include <algorithm>
#include <cstdio>

#include "quartet/core/units.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

void StageStepMetrics::reduce(MPI_Comm world) {
  std::vector<double> sums{loss_sum, units, tokens};
  sums.insert(sums.end(), stat_sums.begin(), stat_sums.end());
  watched::allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, world,
                     "the step's sums");
  loss_sum = sums[0];
  units = sums[1];
  tokens = sums[2];
  std::copy(sums.begin() + 3, sums.end(), stat_sums.begin());
  double most[4] = {lr, grad_norm, step_seconds, train_seconds};
  watched::allreduce(MPI_IN_PLACE, most, 4, MPI_DOUBLE, MPI_MAX, world, "the step's rate, norm and times");
  lr = most[0];
  grad_norm = most[1];
  step_seconds = most[2];
  train_seconds = most[3];
}

double StageStepMetrics::loss() const { return loss_sum / std::max(1.0, units); }

std::map<std::string, double> StageStepMetrics::named() const {
  std::map<std::string, double> m = {{"loss", loss()},
                                     {"units", units},
                                     {"tokens", tokens},
                                     {"lr", lr},
                                     {"grad_norm", grad_norm},
                                     {"tokens_per_s", tokens / std::max(1e-9, train_seconds)},
                                     {"time_step", step_seconds}};
  for (size_t k = 0; k < stat_names.size(); ++k) m[stat_names[k]] = stat_sums[k] / std::max(1.0, units);
  return m;
}

std::string StageStepMetrics::log_line(long long step, long long steps, double eta_seconds) const {
  const int width = static_cast<int>(std::to_string(steps).size());
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %*lld/%lld | loss %.4f", width, step, steps, loss());
  std::string line = buf;
  for (size_t k = 0; k < stat_names.size(); ++k) {
    std::snprintf(buf, sizeof buf, " | %s %.3f", stat_names[k].c_str(), stat_sums[k] / std::max(1.0, units));
    line += buf;
  }
  const double rate = tokens / std::max(1e-9, train_seconds);
  std::snprintf(buf, sizeof buf, " | lr %.2e | grad %.3f | %.3gk tok/s | %.2fs/step | eta %s", lr, grad_norm,
                rate / 1e3, step_seconds, duration_text(eta_seconds).c_str());
  return line + buf;
}

}  // namespace quartet
