#pragma once
// The deck's [train] section: micro-batches, the optimizer and its learning-rate schedule, for
// every command that trains (shard/sharded_adamw.hpp, engine/lr_schedule.hpp).
#include "quartet/core/settings.hpp"

namespace quartet {

enum class ReducePrecision { float32, model };  // train.reduce_dtype
enum class LrSchedule { constant, linear, cosine };
const char* name_of(ReducePrecision value);
const char* name_of(LrSchedule value);

struct TrainConfig {            // [train]
  int micro_batch = 4;          // sequences per forward/backward pass and rank
  double max_grad_norm = 1.0;   // clip the global gradient norm (0 = off)
  double adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8;
  ReducePrecision reduce_dtype = ReducePrecision::float32;  // gradients reduce-scattered in float32 or the model's dtype
  int warmup = 0;               // learning-rate warm-up, optimizer steps
  LrSchedule schedule = LrSchedule::constant;  // decay after warm-up
  double min_lr_ratio = 0.1;    // the decayed learning rate's floor, as a fraction of lr
  bool cuda_graphs = true;      // a one-rank GPU model's micro-batches as CUDA graphs
  // quartet train's updates: micro-batches of sequences packed back to back without padding,
  // up to this many tokens each (0 = micro_batch padded sequences); engine/packed_rollouts.hpp.
  int micro_batch_tokens = 0;
};

const Section<TrainConfig>& train_section();

}  // namespace quartet
