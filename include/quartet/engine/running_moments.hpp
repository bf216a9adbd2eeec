#pragma once
// The reward normaliser's state (algorithm.normalize_rewards), which a checkpoint keeps.
#include <torch/types.h>

#include "quartet/dist/collectives.hpp"

namespace quartet {

// Running mean and variance of scores across iterations (Chan's parallel update), for reward
// normalisation: normalise() = (x - mean) / std after update(x). State is plain numbers so a
// checkpoint can store it. var is the population variance of every score seen; std in
// normalise() is sqrt(var), floored at 1e-8.
struct RunningMoments {
  double mean = 0, var = 1, count = 0;
  // Adds a batch (all of the group's scores when `group` is given).
  void update(const torch::Tensor& x, Collectives* group = nullptr);
  torch::Tensor normalise(const torch::Tensor& x) const;
};

}  // namespace quartet
