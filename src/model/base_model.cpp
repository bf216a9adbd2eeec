#include "quartet/model/base_model.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/model/decode_kernels.hpp"

namespace quartet::layers {

BaseImpl::BaseImpl(const ModelConfig& c, const Build& b) {
  const int64_t h = c.hidden_size;
  const char* layers_name = "layers";
  switch (c.family) {
    case Family::llama: {
      // LlamaModel passes padding_idx=pad_token_id to nn.Embedding.
      int64_t pad = c.pad_token_id && *c.pad_token_id >= 0 && *c.pad_token_id < c.vocab_size ? *c.pad_token_id : -1;
      embed = register_module("embed_tokens", Embedding(c.vocab_size, h, pad, b));
      break;
    }
    case Family::gpt2:
      embed = register_module("wte", Embedding(c.vocab_size, h, -1, b));
      wpe = register_module("wpe", Embedding(c.max_positions, h, -1, b));
      layers_name = "h";
      break;
    case Family::gptj:
      embed = register_module("wte", Embedding(c.vocab_size, h, -1, b));
      layers_name = "h";
      break;
    case Family::gpt_neox:
      embed = register_module("embed_in", Embedding(c.vocab_size, h, -1, b));
      break;
  }
  list = register_module(layers_name, torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks.push_back(Block(c, b));
    list->push_back(blocks.back());
  }
  const char* norm_name = c.family == Family::llama      ? "norm"
                          : c.family == Family::gpt_neox ? "final_layer_norm"
                                                         : "ln_f";
  norm = register_module(norm_name, Norm(h, c.norm_eps, c.family == Family::llama, b));
}

const char* base_prefix(Family f) {
  switch (f) {
    case Family::llama: return "model";
    case Family::gpt2:
    case Family::gptj: return "transformer";
    case Family::gpt_neox: return "gpt_neox";
  }
  return "model";
}

bool can_carry(const Base& base, const torch::Tensor& x) {
  const auto& w = base->norm->weight;
  return x.is_contiguous() && w.scalar_type() == x.scalar_type() && w.is_contiguous() &&
         std::all_of(base->blocks.begin(), base->blocks.end(), [&](Block b) { return b->can_carry(x); });
}

torch::Tensor final_norm(Base& base, const torch::Tensor& x, bool carry, double eps) {
  return carry && x.dim() == 4 ? add_rms_norm(x[0], x[1], base->norm->weight, eps).second : base->norm(x);
}

}  // namespace quartet::layers
