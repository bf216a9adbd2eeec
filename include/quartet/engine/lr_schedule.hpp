#pragma once
// The learning rate at optimizer step `step` (0-based) of `total`: linear warm-up from 0 over
// `warmup` steps, then constant, or linear or cosine decay to lr * min_ratio at the last step.
// Warm-up: lr * (step + 1) / warmup, so step 0 already moves and step warmup - 1 reaches lr.
// Decay: progress p = (step - warmup) / (total - 1 - warmup) from lr (p = 0) to lr * min_ratio
// (p = 1, step total - 1). step must be in [0, total); schedule constant | linear | cosine.
#include "quartet/core/config.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

double learning_rate(int step, int total, int warmup, double lr, LrSchedule schedule, double min_ratio);

}  // namespace quartet
