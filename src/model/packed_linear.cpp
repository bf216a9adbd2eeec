#include "quartet/model/packed_linear.hpp"

#include <torch/autograd.h>
#include <torch/types.h>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

namespace quartet {

namespace {
const KernelSwitch g_switch(&KernelsConfig::packed_products, false, "set_packed_products");
}  // namespace

bool packed_products_enabled() { return g_switch.on(); }
void set_packed_products(bool on) { g_switch.set(on); }

torch::Tensor adjacent_rows(std::initializer_list<torch::Tensor> parts) {
  const torch::Tensor& first = *parts.begin();
  if (!first.defined() || first.dim() != 2 || !first.is_contiguous()) return {};
  const int64_t cols = first.size(1);
  int64_t rows = 0;
  const char* next = static_cast<const char*>(first.data_ptr());
  for (const auto& t : parts) {
    if (!t.defined() || t.dim() != 2 || !t.is_contiguous() || t.size(1) != cols ||
        t.scalar_type() != first.scalar_type() || !t.storage().is_alias_of(first.storage()) ||
        static_cast<const char*>(t.data_ptr()) != next)
      return {};
    rows += t.size(0);
    next += t.numel() * t.element_size();
  }
  return first.as_strided({rows, cols}, {cols, 1});
}

namespace {

torch::Tensor packed(const std::vector<torch::Tensor>& w) {
  return w.size() == 3 ? adjacent_rows({w[0], w[1], w[2]}) : adjacent_rows({w[0], w[1]});
}

// The forward and backward of PackedLinear2 and PackedLinear3 (autograd functions take a fixed
// number of tensors, none of them undefined).
torch::autograd::variable_list forward_impl(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                            const std::vector<torch::Tensor>& ws, bool split) {
  std::vector<torch::Tensor> saved{x};
  saved.insert(saved.end(), ws.begin(), ws.end());
  ctx->save_for_backward(saved);
  ctx->saved_data["split"] = split;
  auto y = torch::linear(x, packed(ws));
  if (!split) return {y};
  torch::autograd::variable_list parts;
  int64_t at = 0;
  for (const auto& w : ws) {
    parts.push_back(y.narrow(-1, at, w.size(0)));
    at += w.size(0);
  }
  return parts;
}

torch::autograd::variable_list backward_impl(torch::autograd::AutogradContext* ctx,
                                             const torch::autograd::variable_list& grad) {
  const auto saved = ctx->get_saved_variables();
  const torch::Tensor& x = saved[0];
  const std::vector<torch::Tensor> ws(saved.begin() + 1, saved.end());
  const torch::Tensor w = packed(ws);
  QUARTET_CHECK(w.defined(), "packed_linear: the weights no longer lie back to back");
  const int64_t K = x.size(-1), N = w.size(0);
  torch::Tensor gy;
  if (ctx->saved_data["split"].toBool()) {
    std::vector<torch::Tensor> parts;
    for (size_t k = 0; k < ws.size(); ++k) {
      // An output nobody used has no gradient: zeros in its place.
      auto sizes = x.sizes().vec();
      sizes.back() = ws[k].size(0);
      parts.push_back(grad[k].defined() ? grad[k] : torch::zeros(sizes, x.options()));
    }
    gy = torch::cat(parts, -1);
  } else {
    gy = grad[0];
  }
  const auto g2 = gy.reshape({-1, N});
  torch::autograd::variable_list out{g2.mm(w).view(x.sizes())};
  const auto dw = g2.t().mm(x.reshape({-1, K}));
  int64_t at = 0;
  for (const auto& wk : ws) {
    out.push_back(dw.narrow(0, at, wk.size(0)));
    at += wk.size(0);
  }
  out.push_back(torch::Tensor());  // split
  return out;
}

struct PackedLinear2 : torch::autograd::Function<PackedLinear2> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& w0, const torch::Tensor& w1, bool split) {
    return forward_impl(ctx, x, {w0, w1}, split);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return backward_impl(ctx, grad);
  }
};

struct PackedLinear3 : torch::autograd::Function<PackedLinear3> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& w0, const torch::Tensor& w1,
                                                const torch::Tensor& w2, bool split) {
    return forward_impl(ctx, x, {w0, w1, w2}, split);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return backward_impl(ctx, grad);
  }
};

}  // namespace

std::vector<torch::Tensor> packed_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                         bool split) {
  QUARTET_CHECK(weights.size() == 2 || weights.size() == 3, "packed_linear: 2 or 3 weights");
  {
    torch::NoGradGuard no_grad;
    if (!packed(weights).defined()) return {};
  }
  if (weights.size() == 2) return PackedLinear2::apply(x, weights[0], weights[1], split);
  return PackedLinear3::apply(x, weights[0], weights[1], weights[2], split);
}

}  // namespace quartet
