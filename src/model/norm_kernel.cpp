#include "quartet/model/norm_kernel.hpp"

#include <torch/autograd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"
#include "quartet/model/decode_kernels.hpp"

#ifdef QUARTET_WITH_NORM_KERNEL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
int add_rms_norm_backward_threads(bool bf16, int H);
cudaError_t launch_add_rms_norm_backward(bool bf16, const void* s, const void* gn, const void* gs, const void* w,
                                         void* ds, float* dw_partial, int64_t R, int H, int blocks, float eps,
                                         cudaStream_t stream);
}  // namespace quartet::kernels
#endif

namespace quartet {

namespace {

#ifdef QUARTET_WITH_NORM_KERNEL
constexpr bool kCompiledIn = true;
#else
constexpr bool kCompiledIn = false;
#endif
KernelSwitch g_switch(kCompiledIn, "QUARTET_NORM_KERNEL", "set_norm_kernel");

// {ds, dw}: the gradient of x (and of a) and of the weight, from the saved sum s, the norm's
// gradient gn and the sum's own gs (undefined when the sum went nowhere else).
std::pair<torch::Tensor, torch::Tensor> backward_kernel([[maybe_unused]] const torch::Tensor& s,
                                                        [[maybe_unused]] const torch::Tensor& gn,
                                                        [[maybe_unused]] const torch::Tensor& gs,
                                                        [[maybe_unused]] const torch::Tensor& w,
                                                        [[maybe_unused]] double eps) {
#ifdef QUARTET_WITH_NORM_KERNEL
  const c10::cuda::CUDAGuard guard(s.device());
  const int64_t H = s.size(-1), R = s.numel() / H;
  auto ds = torch::empty_like(s);
  if (R == 0) return {ds, torch::zeros_like(w)};
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s.device().index());
  // Two blocks an SM, each striding over the rows with its share of dw in registers; their
  // shares then summed by ATen (a [blocks, H] float32 sum, a few microseconds).
  const int blocks = static_cast<int>(std::min<int64_t>(R, 2 * static_cast<int64_t>(sms)));
  auto partial = torch::empty({blocks, H}, s.options().dtype(torch::kFloat32));
  const cudaError_t err = kernels::launch_add_rms_norm_backward(
      s.scalar_type() == torch::kBFloat16, s.data_ptr(), gn.data_ptr(), gs.defined() ? gs.data_ptr() : nullptr,
      w.data_ptr(), ds.data_ptr(), partial.data_ptr<float>(), R, static_cast<int>(H), blocks,
      static_cast<float>(eps), c10::cuda::getCurrentCUDAStream(s.device().index()).stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("add_rms_norm backward kernel: launch failed: ") +
                                        cudaGetErrorString(err));
  return {ds, partial.sum(0).to(w.scalar_type())};
#else
  QUARTET_CHECK(false, "add_rms_norm backward kernel: this build has no device kernels (CMake found no CUDA compiler)");
  return {};
#endif
}

struct AddRmsNorm : torch::autograd::Function<AddRmsNorm> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& a, const torch::Tensor& weight, double eps) {
    auto [sum, normed] = add_rms_norm(x, a, weight, eps);
    ctx->set_materialize_grads(false);  // an output without a gradient: undefined, not zeros
    ctx->save_for_backward({sum, weight});
    ctx->saved_data["eps"] = eps;
    return {sum, normed};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gs = grad[0];
    if (!grad[1].defined())  // the norm went nowhere: the sum's gradient passes through
      return {gs, gs, torch::Tensor(), torch::Tensor()};
    auto [ds, dw] = backward_kernel(saved[0], grad[1].contiguous(), gs.defined() ? gs.contiguous() : gs, saved[1],
                                    ctx->saved_data["eps"].toDouble());
    return {ds, ds, dw, torch::Tensor()};
  }
};

}  // namespace

bool norm_kernel_enabled() { return g_switch.on(); }

void set_norm_kernel(bool on) { g_switch.set(on); }

bool add_rms_norm_trainable_supports(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& weight) {
#ifdef QUARTET_WITH_NORM_KERNEL
  if (!g_switch.on() || !x.is_cuda() || x.dim() < 1 || x.sizes() != a.sizes() ||
      x.scalar_type() != a.scalar_type() || weight.scalar_type() != x.scalar_type() || x.device() != a.device() ||
      weight.device() != x.device() || !x.is_contiguous() || !a.is_contiguous() || !weight.is_contiguous() ||
      weight.dim() != 1 || weight.size(0) != x.size(-1))
    return false;
  const bool bf16 = x.scalar_type() == torch::kBFloat16;
  if (!bf16 && x.scalar_type() != torch::kFloat32) return false;
  const auto aligned = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  return aligned(x) && aligned(a) && aligned(weight) &&
         kernels::add_rms_norm_backward_threads(bf16, static_cast<int>(x.size(-1))) > 0;
#else
  (void)x, (void)a, (void)weight;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> add_rms_norm_trainable(const torch::Tensor& x, const torch::Tensor& a,
                                                               const torch::Tensor& weight, double eps) {
  QUARTET_CHECK(add_rms_norm_trainable_supports(x, a, weight),
                "add_rms_norm_trainable: the kernel does not take these tensors");
  auto out = AddRmsNorm::apply(x, a, weight, eps);
  return {out[0], out[1]};
}

}  // namespace quartet
