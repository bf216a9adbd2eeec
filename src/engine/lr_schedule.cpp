#include "quartet/engine/lr_schedule.hpp"

#include <cmath>

#include "quartet/core/check.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

// Warm-up: lr * (step + 1) / warmup for step < warmup, so the first step already moves
// (lr / warmup) and step warmup - 1 reaches lr. Decay: over steps warmup .. total - 1 with
// progress p = (step - warmup) / (total - 1 - warmup), from lr at p = 0 to lr * min_ratio at
// p = 1 (the last step): linear lr * (1 - (1 - min_ratio) p), cosine
// lr * (min_ratio + (1 - min_ratio) (1 + cos(pi p)) / 2). When the decay span is a single
// step (total - 1 == warmup) that step is the last one and gets lr * min_ratio.
double learning_rate(int step, int total, int warmup, double lr, LrSchedule schedule, double min_ratio) {
  QUARTET_CHECK(total > 0, "learning_rate: total steps must be > 0, got " + std::to_string(total));
  QUARTET_CHECK(step >= 0 && step < total, "learning_rate: step " + std::to_string(step) +
                                               " is outside 0 .. " + std::to_string(total - 1));
  QUARTET_CHECK(warmup >= 0, "learning_rate: warmup must be >= 0, got " + std::to_string(warmup));
  QUARTET_CHECK(min_ratio >= 0 && min_ratio <= 1,
                "learning_rate: min_ratio must be in [0, 1], got " + std::to_string(min_ratio));
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  if (schedule == LrSchedule::constant) return lr;
  const int span = total - 1 - warmup;
  const double p = span > 0 ? double(step - warmup) / double(span) : 1.0;
  const double kPi = 3.14159265358979323846;
  const double shape = schedule == LrSchedule::linear ? 1.0 - p : 0.5 * (1.0 + std::cos(kPi * p));
  return lr * (min_ratio + (1.0 - min_ratio) * shape);
}

}  // namespace quartet
