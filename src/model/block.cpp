#include "quartet/model/block.hpp"

#include <torch/types.h>

#include <tuple>

#include "quartet/model/decode_kernels.hpp"

namespace quartet::layers {

BlockImpl::BlockImpl(const ModelConfig& c, const Build& b) : c_(c) {
  const bool rms = c.family == Family::llama;
  const int64_t h = c.hidden_size;
  switch (c.family) {
    case Family::llama:
      ln1_ = register_module("input_layernorm", Norm(h, c.norm_eps, rms, b));
      attn_ = register_module("self_attn", Attention(c, b));
      ln2_ = register_module("post_attention_layernorm", Norm(h, c.norm_eps, rms, b));
      mlp_ = register_module("mlp", Mlp(c, b));
      break;
    case Family::gpt2:
      ln1_ = register_module("ln_1", Norm(h, c.norm_eps, false, b));
      attn_ = register_module("attn", Attention(c, b));
      ln2_ = register_module("ln_2", Norm(h, c.norm_eps, false, b));
      mlp_ = register_module("mlp", Mlp(c, b));
      break;
    case Family::gptj:
      ln1_ = register_module("ln_1", Norm(h, c.norm_eps, false, b));
      attn_ = register_module("attn", Attention(c, b));
      mlp_ = register_module("mlp", Mlp(c, b));
      break;
    case Family::gpt_neox:
      ln1_ = register_module("input_layernorm", Norm(h, c.norm_eps, false, b));
      ln2_ = register_module("post_attention_layernorm", Norm(h, c.norm_eps, false, b));
      attn_ = register_module("attention", Attention(c, b));
      mlp_ = register_module("mlp", Mlp(c, b));
      break;
  }
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const Step& s, int64_t layer) {
  const bool decode = s.slot.defined();
  if (s.carry) return forward_carried(x, s, layer);
  if (c_.family == Family::gptj) {
    // One LayerNorm feeds both branches.
    auto h = ln1_(x);
    return attn_(h, s, layer) + mlp_->forward(h, decode) + x;
  }
  auto a = attn_(ln1_(x), s, layer);
  if (c_.parallel_residual) return mlp_->forward(ln2_(x), decode) + a + x;  // NeoX use_parallel_residual
  if (decode && c_.family == Family::llama && !torch::GradMode::is_enabled() && decode_kernels_for(x) &&
      x.is_contiguous() && a.is_contiguous() && ln2_->weight.is_contiguous() &&
      ln2_->weight.scalar_type() == x.scalar_type()) {
    // The residual add and the RMSNorm after it in one kernel.
    auto [y, h] = add_rms_norm(x, a, ln2_->weight, c_.norm_eps);
    return y + mlp_->forward(h, decode);
  }
  auto y = x + a;
  return y + mlp_->forward(ln2_(y), decode);
}

torch::Tensor BlockImpl::forward_carried(const torch::Tensor& x, const Step& s, int64_t layer) {
  torch::Tensor residual, h;
  if (x.dim() == 4) {
    std::tie(residual, h) = add_rms_norm(x[0], x[1], ln1_->weight, c_.norm_eps);
  } else {
    residual = x;
    h = ln1_(x);
  }
  auto a = attn_(h, s, layer);
  auto out = torch::empty({2, residual.size(0), residual.size(1), residual.size(2)}, residual.options());
  auto h2 = add_rms_norm(residual, a, ln2_->weight, c_.norm_eps, out[0]).second;
  mlp_->forward_into(h2, out[1], /*decode=*/s.slot.defined());
  return out;
}

bool BlockImpl::can_carry(const torch::Tensor& x) {
  return c_.family == Family::llama && !c_.parallel_residual && decode_kernels_for(x) &&
         !torch::GradMode::is_enabled() && ln1_->weight.scalar_type() == x.scalar_type() &&
         ln2_->weight.scalar_type() == x.scalar_type() && ln1_->weight.is_contiguous() &&
         ln2_->weight.is_contiguous();
}

}  // namespace quartet::layers
