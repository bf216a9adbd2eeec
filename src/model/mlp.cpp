#include "quartet/model/mlp.hpp"

#include <torch/types.h>

#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/packed_linear.hpp"
#include "quartet/model/swiglu_kernel.hpp"

namespace quartet::layers {

MlpImpl::MlpImpl(const ModelConfig& c, const Build& b) : c_(c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  switch (c.family) {
    case Family::llama:
      gate_ = register_module("gate_proj", Dense(h, i, c.mlp_bias, b));
      up_ = register_module("up_proj", Dense(h, i, c.mlp_bias, b));
      down_ = register_module("down_proj", Dense(i, h, c.mlp_bias, b));
      break;
    case Family::gpt2:
      c_fc_ = register_module("c_fc", Conv1D(h, i, b));
      c_proj_ = register_module("c_proj", Conv1D(i, h, b));
      break;
    case Family::gptj:
      up_ = register_module("fc_in", Dense(h, i, true, b));
      down_ = register_module("fc_out", Dense(i, h, true, b));
      break;
    case Family::gpt_neox:
      up_ = register_module("dense_h_to_4h", Dense(h, i, true, b));
      down_ = register_module("dense_4h_to_h", Dense(i, h, true, b));
      break;
  }
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, bool decode) {
  if (c_.family == Family::llama) return down_(llama_activation(x, decode));
  if (c_.family == Family::gpt2) return c_proj_(activate(c_.activation, c_fc_(x)));
  return down_(activate(c_.activation, up_(x)));
}

void MlpImpl::forward_into(const torch::Tensor& x, const torch::Tensor& out, bool decode) {
  if (c_.family == Family::llama && !down_->bias.defined()) {
    const int64_t rows = x.numel() / x.size(-1);
    auto act = llama_activation(x, decode);
    auto dst = out.view({rows, -1});
    at::mm_out(dst, act.reshape({rows, -1}), down_->weight.t());
    return;
  }
  out.copy_(forward(x, decode));
}

torch::Tensor MlpImpl::llama_activation(const torch::Tensor& x, bool decode) {
  if (decode && !torch::GradMode::is_enabled() && !gate_->bias.defined()) {
    auto w = adjacent_rows({gate_->weight, up_->weight});
    if (w.defined()) {
      auto gate_up = torch::linear(x, w);
      if ((c_.activation == "silu" || c_.activation == "swish") && decode_kernels_for(gate_up))
        return silu_mul(gate_up);
      const int64_t i = c_.intermediate_size;
      return activate(c_.activation, gate_up.narrow(-1, 0, i)) * gate_up.narrow(-1, i, i);
    }
  }
  if (c_.activation == "silu" || c_.activation == "swish") {
    if (x.is_cuda() && !gate_->bias.defined() && swiglu_kernel_enabled() && packed_products_enabled()) {
      // Gate and up from one product, SwiGLU on it as it lies (model/packed_linear.hpp).
      auto gate_up = packed_linear(x, {gate_->weight, up_->weight}, /*split=*/false);
      if (!gate_up.empty()) {
        if (swiglu_packed_supports(gate_up[0])) return swiglu_packed(gate_up[0]);
        const int64_t i = c_.intermediate_size;
        return torch::silu(gate_up[0].narrow(-1, 0, i)) * gate_up[0].narrow(-1, i, i);
      }
    }
    auto gate = gate_(x), up = up_(x);
    if (swiglu_kernel_supports(gate, up)) return swiglu(gate, up);
    return torch::silu(gate) * up;
  }
  return activate(c_.activation, gate_(x)) * up_(x);
}

}  // namespace quartet::layers
