#include "quartet/model/checkpointing.hpp"

#include <torch/autograd.h>
#include <torch/custom_class.h>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

// The graph node keeps the block function alive until backward through this holder.
struct BlockFn : torch::CustomClassHolder {
  explicit BlockFn(std::function<torch::Tensor(const torch::Tensor&)> f) : fn(std::move(f)) {}
  std::function<torch::Tensor(const torch::Tensor&)> fn;
};

struct Checkpointed : torch::autograd::Function<Checkpointed> {
  // apply() runs this with grad mode off, so fn keeps no activations.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& input, at::TensorList params,
                                                c10::intrusive_ptr<BlockFn> fn) {
    // Saving the parameters too makes autograd refuse a backward after they were changed in
    // place (an optimizer step between forward and backward would recompute something else).
    std::vector<torch::Tensor> saved{input};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(fn);
    return {fn->fn(input)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto fn = c10::static_intrusive_pointer_cast<BlockFn>(ctx->saved_data["fn"].toCapsule());
    auto saved = ctx->get_saved_variables();
    const int64_t n = static_cast<int64_t>(saved.size()) - 1;

    torch::Tensor x = saved[0].detach().requires_grad_(saved[0].requires_grad());
    torch::Tensor out;
    {
      torch::AutoGradMode grad_on(true);
      out = fn->fn(x);
    }
    std::vector<torch::Tensor> targets;
    std::vector<int64_t> slot;  // output position of each target (0 = input, 1 + i = param i)
    if (x.requires_grad()) {
      targets.push_back(x);
      slot.push_back(0);
    }
    // fn reads the block's parameters directly; the same tensors are the targets here.
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor& p = saved[static_cast<size_t>(1 + i)];
      if (p.requires_grad()) {
        targets.push_back(p);
        slot.push_back(1 + i);
      }
    }
    torch::autograd::variable_list result(static_cast<size_t>(n + 2));
    if (!targets.empty() && out.requires_grad()) {
      auto grads = torch::autograd::grad({out}, targets, {grad_out[0]}, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < grads.size(); ++k) result[static_cast<size_t>(slot[k])] = grads[k];
    }
    return result;
  }
};

}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn,
                         const torch::Tensor& input, const std::vector<torch::Tensor>& params) {
  QUARTET_CHECK(fn, "checkpoint: no block function");
  auto holder = c10::make_intrusive<BlockFn>(std::move(fn));
  return Checkpointed::apply(input, at::TensorList(params), holder)[0];
}

}  // namespace quartet
