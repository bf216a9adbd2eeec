#include "quartet/model/layers.hpp"

#include <torch/types.h>

#include <cmath>

#include "quartet/model/decode_kernels.hpp"

namespace quartet::layers {

torch::Tensor Build::normal(std::vector<int64_t> shape) const {
  auto t = torch::empty(shape, options);
  if (init) t.normal_(0.0, std);
  return t;
}

torch::Tensor Build::filled(std::vector<int64_t> shape, double value) const {
  auto t = torch::empty(shape, options);
  if (init) t.fill_(value);
  return t;
}

DenseImpl::DenseImpl(int64_t in, int64_t out, bool with_bias, const Build& b, bool with_weight) {
  if (with_weight) weight = register_parameter("weight", b.normal({out, in}));
  if (with_bias) bias = register_parameter("bias", b.filled({out}, 0.0));
}

torch::Tensor DenseImpl::forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }

Conv1DImpl::Conv1DImpl(int64_t in, int64_t out, const Build& b) {
  weight = register_parameter("weight", b.normal({in, out}));
  bias = register_parameter("bias", b.filled({out}, 0.0));
}

torch::Tensor Conv1DImpl::forward(const torch::Tensor& x) {
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(1);
  return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(sizes);
}

NormImpl::NormImpl(int64_t n, double eps, bool rms, const Build& b) : eps_(eps), rms_(rms) {
  weight = register_parameter("weight", b.filled({n}, 1.0));
  if (!rms) bias = register_parameter("bias", b.filled({n}, 0.0));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (!rms_) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps_);
  // One fused kernel on CUDA (float32 statistics, as HF's LlamaRMSNorm), instead of the
  // six of the written-out form; HF also rounds to the input dtype before the weight, this
  // rounds once, at the end.
  return at::rms_norm(x, {x.size(-1)}, weight, eps_);
}

EmbeddingImpl::EmbeddingImpl(int64_t n, int64_t d, int64_t padding_idx, const Build& b) : padding_idx_(padding_idx) {
  weight = register_parameter("weight", b.normal({n, d}));
  if (b.init && padding_idx >= 0) {
    torch::NoGradGuard no_grad;
    weight[padding_idx].zero_();
  }
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids, padding_idx_); }

void pack_parameters(torch::nn::Module& m, bool keep_values) {
  auto params = m.parameters(true);
  if (params.empty()) return;
  int64_t total = 0;
  for (const auto& p : params) {
    if (p.scalar_type() != params[0].scalar_type() || p.device() != params[0].device()) return;
    total += p.numel();
  }
  auto flat = torch::empty({total}, params[0].options());
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (auto& p : params) {
    auto view = flat.narrow(0, at, p.numel()).view(p.sizes());
    if (keep_values) view.copy_(p);
    p.set_data(view);
    at += p.numel();
  }
}

bool decode_kernels_for(const torch::Tensor& x) {
  return x.is_cuda() && decode_kernels_enabled() &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32);
}

torch::Tensor activate(const std::string& act, const torch::Tensor& x) {
  if (act == "silu" || act == "swish") return torch::silu(x);
  if (act == "gelu") return torch::gelu(x);
  if (act == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  if (act == "relu") return torch::relu(x);
  // gelu_new, written out as HF's NewGELUActivation does (the fused tanh GELU rounds differently).
  return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
}

}  // namespace quartet::layers
