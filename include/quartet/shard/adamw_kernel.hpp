#pragma once
// One AdamW step over a stretch of a flat float32 shard in a single pass (src/shard/adamw_kernel.cu),
// and the conversion that brings a bfloat16 gradient into its float32 shard before it:
// reads the gradient, master weights and both moments once and writes the master, the moments
// and, where the model's shard is a separate bfloat16 copy, that copy too.
//
// ATen's _fused_adamw_ followed by the master -> model copy moves 34 bytes a parameter in two
// passes, and its multi-tensor launches (320 blocks each) reach about 3 TB/s on an H200; this
// moves 30 in one (docs/kernels.md). The arithmetic is _fused_adamw_'s, in float32, so the
// two differ by rounding only (tests/unit/test_adamw_kernel.cpp checks by how much).
//
// Built when CMake finds a CUDA compiler; ShardedAdamW and ShardedModel use them for device-resident
// state unless the deck sets kernels.adamw = false (or set_adamw_kernel(false)).
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace quartet {

bool adamw_kernel_enabled();  // kernels.adamw in force (core/kernel_switch.hpp)
void set_adamw_kernel(bool on);

struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0;  // decoupled: w -= lr * weight_decay * w, before the update
  int64_t step = 1;         // 1-based, for the bias corrections
};

// master, grad, exp_avg, exp_avg_sq: float32, contiguous, on one CUDA device, the same length;
// model: undefined (master is the model's shard) or a bfloat16 tensor of that length, which
// receives the updated weights rounded. Elements [begin, begin + count) are stepped.
// grad_scale (float32 scalar on the device, or undefined) divides the gradient (clipping);
// a nonzero found_inf (float32 scalar on the device) leaves everything untouched.
bool adamw_kernel_supports(const torch::Tensor& master, const torch::Tensor& model);
void adamw_step(const torch::Tensor& master, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                const torch::Tensor& exp_avg_sq, const torch::Tensor& model, int64_t begin, int64_t count,
                const AdamWStep& step, const torch::Tensor& grad_scale, const torch::Tensor& found_inf);
// The same step where the stretch's gradient is a tensor of its own: `count` elements, float32
// or bfloat16 (a parameter's gradient as autograd returned it, read where it lies instead of
// being landed in a float32 shard first: the same bits, one pass fewer), or undefined for a
// parameter without a gradient (zero: the decay and the moments' decay still apply).
void adamw_step_own_gradient(const torch::Tensor& master, const torch::Tensor& stretch_grad,
                             const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, const torch::Tensor& model,
                             int64_t begin, int64_t count, const AdamWStep& step, const torch::Tensor& grad_scale,
                             const torch::Tensor& found_inf);

// Many such steps (one per parameter, say) in a few launches: a launch costs the host about as
// much as a small parameter's step costs the device. Each stretch: master, moments and model
// as adamw_step_own_gradient takes them, with its own decay; the same bits as one call each.
struct AdamWStretch {
  torch::Tensor master, grad, exp_avg, exp_avg_sq, model;  // grad, model: may be undefined
  int64_t begin = 0, count = 0;
  double weight_decay = 0;
};
void adamw_step_many(const std::vector<AdamWStretch>& stretches, const AdamWStep& step,
                     const torch::Tensor& grad_scale, const torch::Tensor& found_inf);

// A gradient landing in its float32 shard: dst = src converted (add: dst += src), with src a
// bfloat16 gradient as autograd returns it (contiguous, as long as dst, on its device). The
// same bits as dst.copy_(src) / dst.add_(src); ATen's converting copy runs element by element
// at about 1.9 TB/s on an H200, this one in 16-byte vectors.
bool land_gradient_supports(const torch::Tensor& dst, const torch::Tensor& src);
void land_gradient(const torch::Tensor& dst, const torch::Tensor& src, bool add);

// The sum of squares of every element of `grads` (contiguous, float32 or bfloat16, on the CUDA
// `device`) as a [1] float32 tensor there: what clipping by the global norm needs, in a launch
// per 96 tensors and one more. Each block sums 16,384 elements' squares in float32, the blocks'
// sums are added in float64 in a fixed order: the same bits every run. ATen's _foreach_norm
// (per-tensor norms, then their squares summed) launches once per few dozen tensors and reads
// at well under the bandwidth (docs/kernels.md).
torch::Tensor grad_sq_norm_many(const std::vector<torch::Tensor>& grads, const torch::Device& device);

}  // namespace quartet
