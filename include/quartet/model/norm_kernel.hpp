#pragma once
// Llama's residual add and the RMSNorm after it, differentiable, in one CUDA kernel each way
// (src/model/norm_kernel.cu; the forward is add_rms_norm's, model/decode_kernels.hpp). In a
// training step ATen spends an add and a norm forward, and backward a norm's input gradient, its
// weight gradient and the add that joins it to the residual stream's own gradient: five passes
// over the activations where this takes two. Forward: x + a with ATen's bits, the norm within
// float32 statistics' rounding of at::rms_norm. Backward: ATen's formula in float32, the
// residual's gradient added before the one rounding (tests/unit/test_norm_kernel.cpp compares
// both with ATen's autograd in float64).
//
// Built when CMake finds a CUDA compiler; used unless QUARTET_NORM_KERNEL=0 is set (or
// set_norm_kernel(false)).
#include <torch/types.h>

#include <utility>

namespace quartet {

bool norm_kernel_enabled();  // compiled in and not switched off
void set_norm_kernel(bool on);

// x and a: the same shape [.., H], contiguous, float32 or bfloat16 on one CUDA device, with H a
// multiple of 256 up to 8192 (bfloat16; 128 to 4096 in float32); weight [H] of their dtype.
bool add_rms_norm_trainable_supports(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& weight);

// {x + a, RMSNorm(x + a) * weight}, differentiable in x, a and weight.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm_trainable(const torch::Tensor& x, const torch::Tensor& a,
                                                               const torch::Tensor& weight, double eps);

}  // namespace quartet
