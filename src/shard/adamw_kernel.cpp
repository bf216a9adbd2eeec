#include "quartet/shard/adamw_kernel.hpp"

#include <cmath>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

#ifdef QUARTET_WITH_DEVICE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
cudaError_t launch_adamw(float* p, const void* g, int grad_kind, float* m, float* v, void* model, int64_t n,
                         float lr_decay, float beta1, float beta2, float eps, float step_size, float bc2_sqrt,
                         const float* grad_scale, const float* found_inf, cudaStream_t stream);
struct AdamWManyStretch {  // as in adamw_kernel.cu
  float* p;
  const void* g;
  int grad_kind;
  float* m;
  float* v;
  void* model;
  int64_t n;
  float lr_decay;
};
cudaError_t launch_adamw_many(const AdamWManyStretch* stretches, int count, float beta1, float beta2, float eps,
                              float step_size, float bc2_sqrt, const float* grad_scale, const float* found_inf,
                              cudaStream_t stream);
cudaError_t launch_land_gradient(float* dst, const void* src, int64_t n, bool add, cudaStream_t stream);
int64_t sq_norm_blocks(const int64_t* n, int count);
cudaError_t launch_sq_norm_many(const void* const* g, const int* kind, const int64_t* n, int count, float* partial,
                                int64_t partials, float* out, cudaStream_t stream);
}
#endif

namespace quartet {

namespace {
const KernelSwitch g_switch(&KernelsConfig::adamw, true, "set_adamw_kernel");
}  // namespace

bool adamw_kernel_enabled() { return g_switch.on(); }

void set_adamw_kernel(bool on) { g_switch.set(on); }

bool adamw_kernel_supports(const torch::Tensor& master, const torch::Tensor& model) {
  if (!g_switch.on() || !master.is_cuda() || master.scalar_type() != torch::kFloat32) return false;
  return !model.defined() || (model.is_cuda() && model.scalar_type() == torch::kBFloat16 &&
                              model.get_device() == master.get_device() && model.is_contiguous());
}

namespace {

// What the kernel needs of one stretch; `who` names the caller in the error. `grad` is
// undefined (zero) or holds the stretch's gradient from element grad_begin on.
void check_stretch(const std::string& who, const torch::Tensor& master, const torch::Tensor& grad, int64_t grad_begin,
                   const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, const torch::Tensor& model,
                   int64_t begin, int64_t count) {
  QUARTET_CHECK(adamw_kernel_supports(master, model), who + ": the kernel does not take these tensors");
  const int64_t n = master.numel();
  for (const auto* t : {&exp_avg, &exp_avg_sq})
    QUARTET_CHECK(t->scalar_type() == torch::kFloat32 && t->is_contiguous() && t->numel() == n &&
                      t->device() == master.device(),
                  who + ": moments must be float32, contiguous, on the master's device and as long");
  QUARTET_CHECK(!grad.defined() || ((grad.scalar_type() == torch::kFloat32 || grad.scalar_type() == torch::kBFloat16) &&
                                    grad.is_contiguous() && grad.device() == master.device() &&
                                    grad_begin + count <= grad.numel()),
                who + ": the gradient must be float32 or bfloat16, contiguous, on the master's device and cover the "
                      "stretch");
  QUARTET_CHECK(master.is_contiguous() && (!model.defined() || model.numel() == n), who + ": shapes differ");
  QUARTET_CHECK(begin >= 0 && count >= 0 && begin + count <= n, who + ": stretch outside the shard");
}

// What the kernel needs of a step's scalars, on `device`.
void check_step(const std::string& who, const AdamWStep& step, const torch::Tensor& grad_scale,
                const torch::Tensor& found_inf, const torch::Device& device) {
  QUARTET_CHECK(step.step >= 1, who + ": steps count from 1");
  for (const auto* t : {&grad_scale, &found_inf})
    QUARTET_CHECK(!t->defined() || (t->numel() == 1 && t->scalar_type() == torch::kFloat32 && t->device() == device),
                  who + ": grad_scale and found_inf are float32 scalars on the masters' device");
}

void step_stretch(const torch::Tensor& master, const torch::Tensor& grad, int64_t grad_begin,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, const torch::Tensor& model,
                  int64_t begin, int64_t count, const AdamWStep& step, const torch::Tensor& grad_scale,
                  const torch::Tensor& found_inf) {
  check_stretch("adamw_step", master, grad, grad_begin, exp_avg, exp_avg_sq, model, begin, count);
  check_step("adamw_step", step, grad_scale, found_inf, master.device());
#ifdef QUARTET_WITH_DEVICE_KERNELS
  // The bias corrections in double on the host, as _fused_adamw_'s functor forms them.
  const double bc1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.step));
  const double bc2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.step));
  const c10::cuda::CUDAGuard guard(master.device());
  void* model_ptr =
      model.defined() ? static_cast<void*>(static_cast<at::BFloat16*>(model.data_ptr()) + begin) : nullptr;
  const void* grad_ptr = nullptr;
  int grad_kind = 2;  // none
  if (grad.defined()) {
    grad_kind = grad.scalar_type() == torch::kFloat32 ? 0 : 1;
    grad_ptr = static_cast<const char*>(grad.data_ptr()) + grad_begin * grad.element_size();
  }
  const cudaError_t err = kernels::launch_adamw(
      master.data_ptr<float>() + begin, grad_ptr, grad_kind, exp_avg.data_ptr<float>() + begin,
      exp_avg_sq.data_ptr<float>() + begin, model_ptr, count, static_cast<float>(step.lr * step.weight_decay),
      static_cast<float>(step.beta1), static_cast<float>(step.beta2), static_cast<float>(step.eps),
      static_cast<float>(step.lr / bc1), static_cast<float>(std::sqrt(bc2)),
      grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr,
      found_inf.defined() ? found_inf.data_ptr<float>() : nullptr, c10::cuda::getCurrentCUDAStream().stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("adamw_step: kernel launch failed: ") + cudaGetErrorString(err));
#else
  (void)grad_begin;
#endif
}

}  // namespace

void adamw_step(const torch::Tensor& master, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                const torch::Tensor& exp_avg_sq, const torch::Tensor& model, int64_t begin, int64_t count,
                const AdamWStep& step, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
  QUARTET_CHECK(grad.defined() && grad.scalar_type() == torch::kFloat32 && grad.numel() == master.numel(),
                "adamw_step: the gradient shard must be float32 and as long as the master");
  step_stretch(master, grad, begin, exp_avg, exp_avg_sq, model, begin, count, step, grad_scale, found_inf);
}

void adamw_step_own_gradient(const torch::Tensor& master, const torch::Tensor& stretch_grad,
                             const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, const torch::Tensor& model,
                             int64_t begin, int64_t count, const AdamWStep& step, const torch::Tensor& grad_scale,
                             const torch::Tensor& found_inf) {
  QUARTET_CHECK(!stretch_grad.defined() || stretch_grad.numel() == count,
                "adamw_step_own_gradient: the gradient has " + std::to_string(stretch_grad.numel()) +
                    " elements, the stretch " + std::to_string(count));
  step_stretch(master, stretch_grad, 0, exp_avg, exp_avg_sq, model, begin, count, step, grad_scale, found_inf);
}

void adamw_step_many(const std::vector<AdamWStretch>& stretches, const AdamWStep& step,
                     const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
  if (stretches.empty()) return;
  const torch::Tensor& first = stretches.front().master;
  check_step("adamw_step_many", step, grad_scale, found_inf, first.device());
#ifdef QUARTET_WITH_DEVICE_KERNELS
  std::vector<kernels::AdamWManyStretch> out;
  out.reserve(stretches.size());
#endif
  for (const auto& s : stretches) {
    QUARTET_CHECK(s.master.device() == first.device(), "adamw_step_many: the stretches are on different devices");
    check_stretch("adamw_step_many", s.master, s.grad, 0, s.exp_avg, s.exp_avg_sq, s.model, s.begin, s.count);
    QUARTET_CHECK(!s.grad.defined() || s.grad.numel() == s.count,
                  "adamw_step_many: a stretch's gradient must be as long as the stretch");
#ifdef QUARTET_WITH_DEVICE_KERNELS
    kernels::AdamWManyStretch k{};
    k.p = s.master.data_ptr<float>() + s.begin;
    k.g = s.grad.defined() ? s.grad.data_ptr() : nullptr;
    k.grad_kind = s.grad.defined() && s.grad.scalar_type() == torch::kBFloat16 ? 1 : 0;
    k.m = s.exp_avg.data_ptr<float>() + s.begin;
    k.v = s.exp_avg_sq.data_ptr<float>() + s.begin;
    k.model = s.model.defined() ? static_cast<void*>(static_cast<at::BFloat16*>(s.model.data_ptr()) + s.begin) : nullptr;
    k.n = s.count;
    k.lr_decay = static_cast<float>(step.lr * s.weight_decay);
    out.push_back(k);
#endif
  }
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const double bc1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.step));
  const double bc2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.step));
  const c10::cuda::CUDAGuard guard(first.device());
  const cudaError_t err = kernels::launch_adamw_many(
      out.data(), static_cast<int>(out.size()), static_cast<float>(step.beta1), static_cast<float>(step.beta2),
      static_cast<float>(step.eps), static_cast<float>(step.lr / bc1), static_cast<float>(std::sqrt(bc2)),
      grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr,
      found_inf.defined() ? found_inf.data_ptr<float>() : nullptr, c10::cuda::getCurrentCUDAStream().stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("adamw_step_many: kernel launch failed: ") + cudaGetErrorString(err));
#endif
}

bool land_gradient_supports(const torch::Tensor& dst, const torch::Tensor& src) {
  return g_switch.on() && dst.is_cuda() && dst.scalar_type() == torch::kFloat32 && dst.is_contiguous() &&
         src.scalar_type() == torch::kBFloat16 && src.is_contiguous() && src.device() == dst.device() &&
         src.numel() == dst.numel();
}

void land_gradient(const torch::Tensor& dst, const torch::Tensor& src, bool add) {
  QUARTET_CHECK(land_gradient_supports(dst, src), "land_gradient: the kernel does not take these tensors");
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const c10::cuda::CUDAGuard guard(dst.device());
  const cudaError_t err = kernels::launch_land_gradient(dst.data_ptr<float>(), src.data_ptr(), dst.numel(), add,
                                                        c10::cuda::getCurrentCUDAStream().stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("land_gradient: kernel launch failed: ") + cudaGetErrorString(err));
#else
  (void)add;
#endif
}

torch::Tensor grad_sq_norm_many(const std::vector<torch::Tensor>& grads, const torch::Device& device) {
  auto out = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  QUARTET_CHECK(g_switch.on() && device.is_cuda(), "grad_sq_norm_many: quartet's kernels are off or not built");
  std::vector<const void*> ptrs;
  std::vector<int> kinds;
  std::vector<int64_t> sizes;
  for (const auto& g : grads) {
    QUARTET_CHECK(g.device() == device && g.is_contiguous() &&
                      (g.scalar_type() == torch::kFloat32 || g.scalar_type() == torch::kBFloat16),
                  "grad_sq_norm_many: gradients must be contiguous float32 or bfloat16 tensors on " + device.str());
    if (g.numel() == 0) continue;
    ptrs.push_back(g.data_ptr());
    kinds.push_back(g.scalar_type() == torch::kBFloat16 ? 1 : 0);
    sizes.push_back(g.numel());
  }
#ifdef QUARTET_WITH_DEVICE_KERNELS
  if (ptrs.empty()) return out;
  const int64_t partials = kernels::sq_norm_blocks(sizes.data(), static_cast<int>(sizes.size()));
  auto partial = torch::empty({partials}, out.options());
  const c10::cuda::CUDAGuard guard(device);
  const cudaError_t err = kernels::launch_sq_norm_many(ptrs.data(), kinds.data(), sizes.data(),
                                                       static_cast<int>(ptrs.size()), partial.data_ptr<float>(),
                                                       partials, out.data_ptr<float>(),
                                                       c10::cuda::getCurrentCUDAStream(device.index()).stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("grad_sq_norm_many: kernel launch failed: ") + cudaGetErrorString(err));
#endif
  return out;
}

}  // namespace quartet
