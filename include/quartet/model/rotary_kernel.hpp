#pragma once
// Rotary embeddings in halves (Llama, NeoX) in one CUDA kernel each way (src/model/rotary_kernel.cu),
// differentiable in x. apply_rotary (rotary.hpp) takes it where it can: ATen's x * cos +
// rotate_half(x) * sin is five kernels forward (negation, concatenation, two products, a sum)
// and about as many backward, for each of q and k in every layer. The kernel rounds each
// product and the sum as those operations do, so results are the same bits both ways
// (tests/unit/test_rotary_kernel.cpp).
//
// Built when CMake finds a CUDA compiler; used unless the deck sets kernels.rotary = false (or
// set_rotary_kernel(false)).
#include <torch/types.h>

namespace quartet {

bool rotary_kernel_enabled();  // kernels.rotary in force (core/kernel_switch.hpp)
void set_rotary_kernel(bool on);

// x [B, H, T, D] (any strides) and cos, sin [B or 1, 1, T, D] with equal strides, all float32 or
// all bfloat16 on one CUDA device, D even, and the kernel enabled.
bool rotary_kernel_supports(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// x cos + rotate_half(x) sin, with rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor rotary_halves(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace quartet
