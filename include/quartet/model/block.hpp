#pragma once
// One transformer block under Hugging Face's parameter names: norms, attention and MLP wired as
// the family does (sequential or parallel residual; GPT-J's one norm for both branches), and
// Llama's carried form that fuses each residual add with the RMSNorm after it.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "quartet/model/attention.hpp"
#include "quartet/model/forward_step.hpp"
#include "quartet/model/layers.hpp"
#include "quartet/model/mlp.hpp"
#include "quartet/model/model_config.hpp"

namespace quartet::layers {

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& c, const Build& b);

  torch::Tensor forward(const torch::Tensor& x, const Step& s, int64_t layer);

  // A Llama block without gradients, with the decode kernels (Step::carry): x is the embeddings
  // [B, T, H] (first block) or what the block before returned, [2, B, T, H]: the residual stream
  // before its MLP, and the MLP's output. Each residual add is fused with the RMSNorm that follows it
  // (this block's two, and the next block's or the final norm for the MLP's): the same sums as
  // x + a, the norms equal to rounding (model/decode_kernels.hpp), two kernels a block fewer.
  torch::Tensor forward_carried(const torch::Tensor& x, const Step& s, int64_t layer);

  // Whether decode_step and hidden_states may carry the residual stream as forward_carried does.
  bool can_carry(const torch::Tensor& x);

 private:
  ModelConfig c_;
  Norm ln1_{nullptr}, ln2_{nullptr};
  Attention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace quartet::layers
