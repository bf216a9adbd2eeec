#pragma once
// The decoder without its head, under the family's base-model prefix (HF's LlamaModel,
// GPT2Model, GPTJModel, GPTNeoXModel): embeddings, the blocks, the final norm.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "quartet/model/block.hpp"
#include "quartet/model/layers.hpp"
#include "quartet/model/model_config.hpp"

namespace quartet::layers {

class BaseImpl : public torch::nn::Module {
 public:
  BaseImpl(const ModelConfig& c, const Build& b);
  Embedding embed{nullptr}, wpe{nullptr};
  torch::nn::ModuleList list{nullptr};
  std::vector<Block> blocks;
  Norm norm{nullptr};
};
TORCH_MODULE(Base);

// "model", "transformer" or "gpt_neox": the base model's name prefix in HF checkpoints.
const char* base_prefix(Family f);

// Whether every block and the final norm may carry the residual stream (BlockImpl::forward_carried):
// decode_step, and hidden_states without gradients.
bool can_carry(const Base& base, const torch::Tensor& x);

// The final norm; carried, the last block's MLP output is added inside it.
torch::Tensor final_norm(Base& base, const torch::Tensor& x, bool carry, double eps);

}  // namespace quartet::layers
