#include "quartet/model/transformer.hpp"

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/checkpointing.hpp"
#include "quartet/model/rotary.hpp"
#include "quartet/model/transformer_state.hpp"

namespace quartet {

using layers::Block;
using layers::Build;
using layers::Dense;

const char* head_name(Head head) {
  switch (head) {
    case Head::causal_lm: return "causal_lm";
    case Head::token_value: return "token_value";
    case Head::sequence_reward: return "sequence_reward";
  }
  return "?";
}

const torch::Tensor& TransformerImpl::Impl::inv_freq_on(torch::Device dev) {
  if (!inv_freq_dev.defined() || inv_freq_dev.device() != dev) inv_freq_dev = inv_freq.to(dev);
  return inv_freq_dev;
}

torch::Tensor TransformerImpl::Impl::run_blocks(const layers::Step& step, torch::Tensor x, int64_t num_layers,
                                                bool recompute) {
  for (int64_t i = 0; i < num_layers; ++i) {
    Block block = base->blocks[static_cast<size_t>(i)];
    if (runner) {
      BlockFn fn = [block, step, i](const torch::Tensor& h) mutable { return block->forward(h, step, i); };
      x = runner(i, fn, x);
    } else if (recompute) {
      // The closure holds the block and this step's tables until backward has used them.
      auto fn = [block, step, i](const torch::Tensor& h) mutable { return block->forward(h, step, i); };
      x = checkpoint(fn, x, block->parameters());
    } else {
      x = block->forward(x, step, i);
    }
  }
  return x;
}

TransformerImpl::TransformerImpl(const ModelConfig& config, Head head)
    : TransformerImpl(config, head, torch::TensorOptions(), true) {}

TransformerImpl::TransformerImpl(const ModelConfig& config, Head head, const torch::TensorOptions& options,
                                 bool random_init)
    : impl_(std::make_shared<Impl>()), config_(config), head_(head) {
  config_.complete("model config");
  const ModelConfig& c = config_;
  Build b{options, random_init, c.initializer_range};
  impl_->base = register_module(layers::base_prefix(c.family), layers::Base(c, b));
  const int64_t h = c.hidden_size;
  switch (head) {
    case Head::causal_lm: {
      const char* name = c.family == Family::gpt_neox ? "embed_out" : "lm_head";
      const bool bias = c.family == Family::gptj;
      if (!c.tie_word_embeddings || bias)
        impl_->head = register_module(name, Dense(h, c.vocab_size, bias, b, !c.tie_word_embeddings));
      break;
    }
    case Head::token_value: {
      // HF names the token-classification Linear "classifier" for GPT-2 and NeoX, "score" for
      // the generic classes; GPT-J has none in HF, quartet uses "score" + bias.
      const char* name = c.family == Family::gpt2 || c.family == Family::gpt_neox ? "classifier" : "score";
      impl_->head = register_module(name, Dense(h, 1, true, b));
      break;
    }
    case Head::sequence_reward:
      impl_->head = register_module("score", Dense(h, 1, false, b));
      break;
  }
  if (c.family != Family::gpt2) impl_->inv_freq = rotary_inv_freq(c, c.max_positions);
  for (auto& block : impl_->base->blocks) layers::pack_parameters(*block, random_init);
}

void TransformerImpl::set_activation_checkpointing(bool on) { impl_->checkpointing = on; }

void TransformerImpl::set_block_runner(BlockRunner runner) { impl_->runner = std::move(runner); }

std::string TransformerImpl::block_prefix(int64_t layer) const {
  QUARTET_CHECK(layer >= 0 && layer < config_.num_layers, "block_prefix: no layer " + std::to_string(layer));
  const bool h = config_.family == Family::gpt2 || config_.family == Family::gptj;
  return std::string(layers::base_prefix(config_.family)) + (h ? ".h." : ".layers.") + std::to_string(layer) + ".";
}

KVCache TransformerImpl::make_cache(int64_t batch, int64_t max_len) const {
  QUARTET_CHECK(batch > 0 && max_len > 0, "make_cache: batch and max_len must be positive");
  auto w = impl_->base->embed->weight;
  KVCache cache;
  cache.max_len = max_len;
  // One allocation and one fill for every layer's keys and values: per-layer tensors cost a
  // device allocation each (about 0.2 ms apiece on an H200 once the caching allocator has
  // given its memory back between phases: 6 ms of every generation for an 886M model).
  // Zeroed, so that slots not yet written hold finite values.
  auto all = torch::zeros({2, config_.num_layers, batch, config_.num_kv_heads, max_len, config_.head_dim},
                          w.options());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    cache.k.push_back(all[0][i]);
    cache.v.push_back(all[1][i]);
  }
  return cache;
}

PagedKV TransformerImpl::make_paged_cache(int64_t rows, int64_t max_blocks, int64_t blocks, int64_t block_size) const {
  QUARTET_CHECK(rows > 0 && max_blocks > 0 && blocks >= 2 && block_size > 0,
                "make_paged_cache: rows, blocks per row and block size must be positive, the pool at least 2 blocks");
  auto w = impl_->base->embed->weight;
  PagedKV cache;
  cache.block_size = block_size;
  // One allocation for every layer, as make_cache; zeroed, so that no slot holds NaN.
  auto all = torch::zeros({2, config_.num_layers, blocks, block_size, config_.num_kv_heads, config_.head_dim},
                          w.options());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    cache.k.push_back(all[0][i]);
    cache.v.push_back(all[1][i]);
  }
  cache.table = torch::zeros({rows, max_blocks}, w.options().dtype(torch::kInt));
  cache.context = torch::zeros({rows}, w.options().dtype(torch::kLong));
  return cache;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                       KVCache* cache) {
  return head_output(hidden_states(input_ids, attention_mask, cache), attention_mask);
}

torch::Tensor TransformerImpl::head_output(const torch::Tensor& hidden, const torch::Tensor& attention_mask) {
  switch (head_) {
    case Head::causal_lm: {
      const auto& h = impl_->head;
      torch::Tensor w = config_.tie_word_embeddings ? impl_->base->embed->weight : h->weight;
      return torch::linear(hidden, w, h.is_empty() ? torch::Tensor() : h->bias);
    }
    case Head::token_value:
      return impl_->head(hidden).squeeze(-1);
    case Head::sequence_reward: {
      // HF takes the rightmost non-pad token: argmax of index * mask (T-1 under left padding).
      const int64_t B = hidden.size(0), T = hidden.size(1);
      auto m = attention_mask.narrow(1, attention_mask.size(1) - T, T).to(hidden.device()) != 0;
      auto idx = (torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(hidden.device())) *
                  m.to(torch::kLong))
                     .argmax(-1);
      auto last = hidden.gather(1, idx.view({B, 1, 1}).expand({B, 1, hidden.size(2)})).squeeze(1);
      return impl_->head(last).squeeze(-1);
    }
  }
  return {};
}

torch::Tensor TransformerImpl::head_at(const torch::Tensor& hidden, const torch::Tensor& at) {
  auto picked = hidden.index_select(1, at.to(hidden.device()));
  if (head_ == Head::causal_lm) return head_output(picked, torch::Tensor());
  return impl_->head(picked).squeeze(-1);  // token_value and sequence_reward alike
}

torch::Tensor TransformerImpl::next_token_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                                 KVCache* cache) {
  QUARTET_CHECK(head_ == Head::causal_lm, "next_token_logits needs the causal_lm head");
  auto h = hidden_states(input_ids, attention_mask, cache);
  return head_output(h.narrow(1, h.size(1) - 1, 1), attention_mask).squeeze(1);
}

}  // namespace quartet
