#include "quartet/model/swiglu_kernel.hpp"

#include <torch/autograd.h>

#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

#ifdef QUARTET_WITH_DEVICE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
cudaError_t launch_swiglu(bool bf16, const void* gate, const void* up, const void* grad, void* out, void* d_gate,
                          int64_t n, int64_t width, int64_t in_stride, int64_t out_stride, cudaStream_t stream);
}
#endif

namespace quartet {

namespace {

const KernelSwitch g_switch(&KernelsConfig::swiglu, true, "set_swiglu_kernel");

// Forward (grad undefined): {SiLU(gate) * up}. Backward: {d_gate, d_up}. Separate contiguous
// gate and up of the same shape.
std::vector<torch::Tensor> run([[maybe_unused]] const torch::Tensor& gate, [[maybe_unused]] const torch::Tensor& up,
                               [[maybe_unused]] const torch::Tensor& grad) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const c10::cuda::CUDAGuard guard(gate.device());
  const bool backward = grad.defined();
  auto out = torch::empty_like(gate);
  auto d_gate = backward ? torch::empty_like(gate) : torch::Tensor();
  const int64_t n = gate.numel();
  const cudaError_t err = kernels::launch_swiglu(gate.scalar_type() == torch::kBFloat16, gate.data_ptr(), up.data_ptr(),
                                                 backward ? grad.data_ptr() : nullptr, out.data_ptr(),
                                                 backward ? d_gate.data_ptr() : nullptr, n, n, n, n,
                                                 c10::cuda::getCurrentCUDAStream().stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("swiglu kernel: launch failed: ") + cudaGetErrorString(err));
  if (backward) return {d_gate, out};
  return {out};
#else
  QUARTET_CHECK(false, "swiglu kernel: this build has no device kernels (CMake found no CUDA compiler)");
  return {};
#endif
}

// Packed: gate_up [.., 2 I] (a fused product, gate then up in each row). Forward (grad
// undefined): SiLU(gate) * up [.., I]. Backward: the packed gradient [.., 2 I].
torch::Tensor run_packed([[maybe_unused]] const torch::Tensor& gate_up, [[maybe_unused]] const torch::Tensor& grad) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const int64_t I = gate_up.size(-1) / 2, n = gate_up.numel() / 2;
  const bool bf16 = gate_up.scalar_type() == torch::kBFloat16;
  const char* base = static_cast<const char*>(gate_up.data_ptr());
  const void* up = base + I * gate_up.element_size();
  cudaError_t err;
  torch::Tensor result;
  if (!grad.defined()) {
    auto sizes = gate_up.sizes().vec();
    sizes.back() = I;
    result = torch::empty(sizes, gate_up.options());
    err = kernels::launch_swiglu(bf16, base, up, nullptr, result.data_ptr(), nullptr, n, I, 2 * I, I,
                                 c10::cuda::getCurrentCUDAStream().stream());
  } else {
    result = torch::empty_like(gate_up);
    char* d = static_cast<char*>(result.data_ptr());
    err = kernels::launch_swiglu(bf16, base, up, grad.data_ptr(), d + I * gate_up.element_size(), d, n, I, 2 * I,
                                 2 * I, c10::cuda::getCurrentCUDAStream().stream());
  }
  QUARTET_CHECK(err == cudaSuccess, std::string("swiglu kernel: launch failed: ") + cudaGetErrorString(err));
  return result;
#else
  QUARTET_CHECK(false, "swiglu kernel: this build has no device kernels (CMake found no CUDA compiler)");
  return {};
#endif
}

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return run(gate, up, torch::Tensor())[0];
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    return run(saved[0], saved[1], grad[0].contiguous());
  }
};

struct SwiGluPacked : torch::autograd::Function<SwiGluPacked> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    return run_packed(gate_up, torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return {run_packed(ctx->get_saved_variables()[0], grad[0].contiguous())};
  }
};

}  // namespace

bool swiglu_kernel_enabled() { return g_switch.on(); }

void set_swiglu_kernel(bool on) { g_switch.set(on); }

bool swiglu_kernel_supports(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!g_switch.on() || !gate.is_cuda() || gate.sizes() != up.sizes() || gate.scalar_type() != up.scalar_type() ||
      gate.device() != up.device() || !gate.is_contiguous() || !up.is_contiguous())
    return false;
  return gate.scalar_type() == torch::kFloat32 || gate.scalar_type() == torch::kBFloat16;
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  QUARTET_CHECK(swiglu_kernel_supports(gate, up), "swiglu: the kernel does not take these tensors");
  return SwiGlu::apply(gate, up);
}

bool swiglu_packed_supports(const torch::Tensor& gate_up) {
  return g_switch.on() && gate_up.is_cuda() && gate_up.is_contiguous() && gate_up.dim() >= 1 &&
         gate_up.size(-1) % 2 == 0 &&
         (gate_up.scalar_type() == torch::kFloat32 || gate_up.scalar_type() == torch::kBFloat16);
}

torch::Tensor swiglu_packed(const torch::Tensor& gate_up) {
  QUARTET_CHECK(swiglu_packed_supports(gate_up), "swiglu_packed: the kernel does not take this tensor");
  return SwiGluPacked::apply(gate_up);
}

}  // namespace quartet
