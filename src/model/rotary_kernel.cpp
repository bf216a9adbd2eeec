#include "quartet/model/rotary_kernel.hpp"

#include <torch/autograd.h>

#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

#ifdef QUARTET_WITH_DEVICE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
cudaError_t launch_rotary(bool bf16, bool backward, const void* x, const int64_t* x_strides, const void* cos,
                          const void* sin, const int64_t* cs_strides, void* out, const int64_t* out_strides, int64_t B,
                          int64_t H, int64_t S, int64_t h, cudaStream_t stream);
}
#endif

namespace quartet {

namespace {

const KernelSwitch g_switch(&KernelsConfig::rotary, true, "set_rotary_kernel");

// The rotation (backward: its transpose, the rotation by -angle) of x into a new tensor laid out
// like x where x is dense, else contiguous.
torch::Tensor rotate([[maybe_unused]] const torch::Tensor& x, [[maybe_unused]] const torch::Tensor& cos,
                     [[maybe_unused]] const torch::Tensor& sin, [[maybe_unused]] bool backward) {
  auto out = torch::empty_like(x);
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const int64_t B = x.size(0), H = x.size(1), S = x.size(2), D = x.size(3);
  // Broadcast dimensions of cos/sin step by 0.
  const int64_t cs[4] = {cos.size(0) == 1 ? 0 : cos.stride(0), 0, cos.stride(2), cos.stride(3)};
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = kernels::launch_rotary(x.scalar_type() == torch::kBFloat16, backward, x.data_ptr(),
                                                 x.strides().data(), cos.data_ptr(), sin.data_ptr(), cs,
                                                 out.data_ptr(), out.strides().data(), B, H, S, D / 2,
                                                 c10::cuda::getCurrentCUDAStream().stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("rotary kernel: launch failed: ") + cudaGetErrorString(err));
#else
  QUARTET_CHECK(false, "rotary kernel: this build has no device kernels (CMake found no CUDA compiler)");
#endif
  return out;
}

struct RotaryHalves : torch::autograd::Function<RotaryHalves> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    // cos and sin come from positions, never from parameters: no gradient for them.
    return {rotate(grad[0], saved[0], saved[1], true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool rotary_kernel_enabled() { return g_switch.on(); }

void set_rotary_kernel(bool on) { g_switch.set(on); }

bool rotary_kernel_supports(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!g_switch.on() || !x.is_cuda() || x.dim() != 4 || cos.dim() != 4 || x.size(3) % 2 != 0) return false;
  const auto dtype = x.scalar_type();
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16) return false;
  if (cos.scalar_type() != dtype || sin.scalar_type() != dtype || cos.device() != x.device() ||
      sin.device() != x.device())
    return false;
  if (cos.sizes() != sin.sizes() || cos.strides() != sin.strides()) return false;
  return (cos.size(0) == 1 || cos.size(0) == x.size(0)) && cos.size(1) == 1 && cos.size(2) == x.size(2) &&
         cos.size(3) == x.size(3);
}

torch::Tensor rotary_halves(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  QUARTET_CHECK(rotary_kernel_supports(x, cos, sin), "rotary_halves: the kernel does not take these tensors");
  return RotaryHalves::apply(x, cos, sin);
}

}  // namespace quartet
