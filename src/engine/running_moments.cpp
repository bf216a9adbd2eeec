#include "quartet/engine/running_moments.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>

#include "quartet/core/check.hpp"

namespace quartet {

void RunningMoments::update(const torch::Tensor& x, Collectives* group) {
  QUARTET_CHECK(x.defined(), "RunningMoments::update: x is undefined");
  torch::NoGradGuard no_grad;
  auto x64 = x.reshape({-1}).to(torch::kFloat64);
  // The batch's count, mean and centred sum of squares over the whole group (two passes, as in
  // masked_whiten), then Chan et al.'s pairwise combination with the running state.
  auto cs = summed_over(group, torch::stack({torch::full({}, double(x64.numel()), x64.options()), x64.sum()}));
  const double n_b = cs[0].item<double>();
  if (n_b == 0) return;  // nothing seen anywhere: the state stays as it is
  const double mean_b = cs[1].item<double>() / n_b;
  auto ss = summed_over(group, (x64 - mean_b).square().sum().reshape({1}));
  const double m2_b = ss[0].item<double>();

  const double n_a = count, n = n_a + n_b;
  const double delta = mean_b - mean;
  // var is the population variance of everything seen; M2 = var * count.
  const double m2 = var * n_a + m2_b + delta * delta * n_a * n_b / n;
  mean += delta * n_b / n;
  var = m2 / n;
  count = n;
}

torch::Tensor RunningMoments::normalise(const torch::Tensor& x) const {
  // std of everything seen (population), floored so a constant history does not divide by 0.
  const double std = std::max(std::sqrt(var), 1e-8);
  return (x.to(torch::kFloat32) - mean) / std;
}

}  // namespace quartet
