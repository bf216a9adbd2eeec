#pragma once
// Llama's MLP activation SiLU(gate) * up in one CUDA kernel each way (src/model/swiglu_kernel.cu),
// differentiable in both inputs. ATen spends two kernels forward (silu, mul) and three backward
// (two products, silu_backward), and autograd keeps SiLU(gate) for the backward as well; this
// keeps only gate and up, and moves about 40% fewer bytes each way.
// Forward: the bits of torch::silu then mul. Backward: ATen's formulas (the gradients of mul,
// then silu_backward's), in float32, rounded where ATen rounds; they agree with autograd's to the
// last bit of the dtype where the compilers fuse the same multiply-adds, within one unit of it
// otherwise (tests/unit/test_swiglu_kernel.cpp counts both).
//
// Built when CMake finds a CUDA compiler; used unless the deck sets kernels.swiglu = false (or
// set_swiglu_kernel(false)).
#include <torch/types.h>

namespace quartet {

bool swiglu_kernel_enabled();  // kernels.swiglu in force (core/kernel_switch.hpp)
void set_swiglu_kernel(bool on);

// gate and up: the same shape, contiguous, float32 or bfloat16, on one CUDA device.
bool swiglu_kernel_supports(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The same on one packed product gate_up [.., 2 I] (gate's I columns, then up's, in each row:
// a fused gate-and-up projection): [.., I], and in backward the packed gradient [.., 2 I], with
// no split or join copied. gate_up: contiguous, float32 or bfloat16, on a CUDA device.
bool swiglu_packed_supports(const torch::Tensor& gate_up);
torch::Tensor swiglu_packed(const torch::Tensor& gate_up);

}  // namespace quartet
