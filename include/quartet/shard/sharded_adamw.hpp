#pragma once
// AdamW over a ShardedModel's shards: each rank updates only the elements it owns. The float32
// master weights and both moments exist only as shards (on the device, or in pinned host memory
// with the step on the CPU when offloaded, as DeepSpeed's offload_optimizer does). Gradients
// are clipped by the global norm over every shard of the group. After the step the master
// shards are cast into the model's compute-dtype parameter shards.
//
// The update is torch.optim.AdamW's, in its order (decoupled decay, bias-corrected moments,
// eps added after the square root), applied with weight decay to matrices only.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "quartet/model/safetensors.hpp"
#include "quartet/shard/sharded_model.hpp"

namespace quartet {

struct AdamWOptions {
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0 = no clipping
  bool offload = false;        // master weights and moments in host memory, step on the CPU
};

class ShardedAdamW {
 public:
  ShardedAdamW(ShardedModel& model, const AdamWOptions& options);

  // One update with learning rate `lr` from the accumulated gradient shards. Returns the
  // global gradient norm before clipping. Collective over the model's group.
  double step(double lr);
  // The same step without waiting for the device: returns the gradient norm as a 0-d float32
  // tensor on the device. Clipping is computed there too, and a non-finite norm makes the
  // fused kernel skip the update (the weights stay as they were); the caller must read the
  // norm back at some point and stop the run if it is not finite (step() does).
  torch::Tensor step_async(double lr);
  double step() { return step(options_.lr); }
  int64_t steps() const { return steps_; }

  // The optimizer state as complete tensors under the parameters' HF names, suffixed
  // ".master", ".exp_avg", ".exp_avg_sq" (float32, CPU), plus the step count: what a
  // checkpoint stores, independent of the group size. Collective.
  NamedTensors full_state();
  // The reverse: every rank takes its slices. Missing or misshapen tensors are named.
  void load_full_state(const NamedTensors& state, int64_t steps);

  // This rank's optimizer shards per unit, in ShardedModel::param_shards()' layout (float32;
  // on the device, or in host memory when offloaded): what a sharded checkpoint writes. When
  // the optimizer keeps no master of its own (a float32 model), the masters are the model's
  // parameter shards.
  const std::vector<torch::Tensor>& master_shards() const { return master_; }
  const std::vector<torch::Tensor>& exp_avg_shards() const { return exp_avg_; }
  const std::vector<torch::Tensor>& exp_avg_sq_shards() const { return exp_avg_sq_; }
  // The reverse, from sources of complete tensors under the parameters' HF names (e.g. a
  // sharded checkpoint's ShardedH5Reader::source("optimizer/master")): every rank reads only
  // its slices, checks every name and shape first (on all ranks alike), casts the masters into
  // the model's compute-dtype parameter shards and sets the step count. Collective-free.
  void load_sliced(const ParamSource& master, const ParamSource& exp_avg, const ParamSource& exp_avg_sq,
                   int64_t steps);

  // Bytes of optimizer state this rank holds (master + moments), and where.
  int64_t state_bytes() const;
  bool offloaded() const { return options_.offload; }

 private:
  // quartet's AdamW kernel takes every unit's state and model shard (adamw_kernel.hpp).
  bool use_kernel(const std::vector<torch::Tensor>& shards) const;

  ShardedModel& model_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  bool own_master_;                   // false: the float32 parameter shards are the masters
  std::vector<torch::Tensor> master_, exp_avg_, exp_avg_sq_, grad_host_;
  torch::Tensor step_count_;  // the step as the fused kernel reads it (0-d, with the master)
  // Per unit, the [begin, count) ranges of this rank's shard that get weight decay, in order.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> decay_;
};

}  // namespace quartet
