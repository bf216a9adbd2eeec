#pragma once
// The feed-forward part of a block under Hugging Face's parameter names: Llama's gated SwiGLU
// (gate_proj, up_proj, down_proj), GPT-2's Conv1D pair, GPT-J's and NeoX's Linear pair.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "quartet/model/layers.hpp"
#include "quartet/model/model_config.hpp"

namespace quartet::layers {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& c, const Build& b);
  // decode: a decoding step, which multiplies gate and up at once where their weights lie
  // back to back (see AttentionImpl::decode_fused).
  torch::Tensor forward(const torch::Tensor& x, bool decode = false);
  // forward() written into out (contiguous, shaped like x): Llama's down projection multiplies
  // straight into it (the same product as forward's), so the residual add can wait for the next
  // block's RMSNorm (BlockImpl::forward_carried).
  void forward_into(const torch::Tensor& x, const torch::Tensor& out, bool decode);

 private:
  // What Llama's down projection multiplies: act(gate(x)) * up(x), gate and up from one
  // product where their weights lie back to back.
  torch::Tensor llama_activation(const torch::Tensor& x, bool decode);

  ModelConfig c_;
  Dense gate_{nullptr}, up_{nullptr}, down_{nullptr};
  Conv1D c_fc_{nullptr}, c_proj_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace quartet::layers
