#pragma once
// The learning rate at optimizer step `step` (0-based) of `total`: linear warm-up from 0 over
// `warmup` steps, then constant, or linear or cosine decay to lr * min_ratio at the last step.
#include <string>

namespace quartet {

double learning_rate(int step, int total, int warmup, double lr, const std::string& schedule, double min_ratio);

}  // namespace quartet
