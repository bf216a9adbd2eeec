// One decoding step with static shapes (TransformerImpl::decode_step, decode_step_paged), the
// form a CUDA graph can capture (model/generation.hpp, model/paged_generation.hpp).
#include <torch/types.h>

#include <tuple>

#include "quartet/core/check.hpp"
#include "quartet/model/attention.hpp"
#include "quartet/model/attention_masks.hpp"
#include "quartet/model/rotary.hpp"
#include "quartet/model/transformer.hpp"
#include "quartet/model/transformer_state.hpp"

namespace quartet {

namespace {

void check_step(const ModelConfig& c, Head head, const torch::Tensor& ids, const torch::Tensor& positions,
                const torch::Tensor& slot, const torch::Tensor& key_valid, const KVCache& cache, int64_t span) {
  QUARTET_CHECK(head == Head::causal_lm, "decode_step needs the causal_lm head");
  QUARTET_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "decode_step: ids and positions must be [batch]");
  const int64_t B = ids.size(0);
  QUARTET_CHECK(static_cast<int64_t>(cache.k.size()) == c.num_layers && cache.k[0].size(0) >= B,
                "decode_step: the KV cache was made for another model or fewer rows");
  QUARTET_CHECK(span > 0 && span <= cache.max_len, "decode_step: span must be within the cache");
  QUARTET_CHECK(key_valid.dim() == 2 && key_valid.size(0) == B && key_valid.size(1) >= span &&
                    key_valid.scalar_type() == torch::kBool,
                "decode_step: key_valid must be a bool [batch, >= span] tensor");
  QUARTET_CHECK(slot.numel() == 1 && slot.scalar_type() == torch::kLong, "decode_step: slot must be one int64");
}

void check_paged_step(const ModelConfig& c, Head head, const torch::Tensor& ids, const torch::Tensor& positions,
                      const PagedKV& cache, int64_t span) {
  QUARTET_CHECK(head == Head::causal_lm, "decode_step_paged needs the causal_lm head");
  QUARTET_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(),
                "decode_step_paged: ids and positions must be [batch]");
  QUARTET_CHECK(static_cast<int64_t>(cache.k.size()) == c.num_layers && cache.table.dim() == 2 &&
                    cache.table.size(0) == ids.size(0) && cache.context.sizes() == ids.sizes(),
                "decode_step_paged: the paged cache was made for another model or batch");
  QUARTET_CHECK(cache.table.scalar_type() == torch::kInt && cache.context.scalar_type() == torch::kLong,
                "decode_step_paged: the block table must be int32 and the contexts int64");
  QUARTET_CHECK(span > 0 && span <= cache.table.size(1) * cache.block_size,
                "decode_step_paged: span must be within a row's blocks");
}

}  // namespace

bool TransformerImpl::decode_needs_host_length(int64_t max_len) const {
  return config_.family != Family::gpt2 && config_.rope_scaling.type == "dynamic" && max_len > config_.max_positions;
}

torch::Tensor TransformerImpl::Impl::decode_hidden(layers::Step& step, const torch::Tensor& ids,
                                                   const torch::Tensor& positions, const torch::Tensor& inv_freq,
                                                   const ModelConfig& c) {
  const int64_t B = ids.size(0);
  const auto dev = ids.device();
  auto pos = positions.view({B, 1});
  auto x = base->embed(ids.view({B, 1}));
  if (c.family == Family::gpt2) {
    x = x + base->wpe(pos);
  } else {
    std::tie(step.cos, step.sin) = rotary_cos_sin(inv_freq, pos, x.scalar_type(), c.family == Family::gptj);
    if (c.family == Family::llama && c.rotary_dim == c.head_dim) {
      const int64_t half = c.head_dim / 2;
      if (!swap_halves_dev.defined() || swap_halves_dev.device() != dev)
        swap_halves_dev = torch::cat({torch::arange(half, c.head_dim), torch::arange(half)}).to(dev);
      step.swap_halves = swap_halves_dev;
      step.sin_signed = torch::cat({-step.sin.narrow(-1, 0, half), step.sin.narrow(-1, half, half)}, -1);
    }
  }
  step.carry = layers::can_carry(base, x);
  x = run_blocks(step, x, c.num_layers, /*recompute=*/false);
  return layers::final_norm(base, x, step.carry, c.norm_eps);
}

torch::Tensor TransformerImpl::decode_step(const torch::Tensor& ids, const torch::Tensor& positions,
                                           const torch::Tensor& slot, const torch::Tensor& key_valid, KVCache& cache,
                                           int64_t span, int64_t host_length) {
  const ModelConfig& c = config_;
  check_step(c, head_, ids, positions, slot, key_valid, cache, span);
  const int64_t B = ids.size(0);
  const auto dev = ids.device();
  layers::Step step;
  step.cache = &cache;
  step.slot = slot.view({1});
  step.span = span;
  // The masks, needed only as the attention's additive biases.
  layers::set_decode_biases(step, key_valid, B, c, impl_->base->embed->weight.scalar_type(), dev);
  torch::Tensor inv;
  if (c.family != Family::gpt2) {
    if (decode_needs_host_length(host_length)) {
      inv = rotary_inv_freq(c, host_length).to(dev);
    } else {
      QUARTET_CHECK(!decode_needs_host_length(cache.max_len) || host_length >= 0,
                    "decode_step: dynamic rotary scaling beyond max_position_embeddings needs the host length");
      inv = impl_->inv_freq_on(dev);
    }
  }
  auto x = impl_->decode_hidden(step, ids, positions, inv, c);
  return head_output(x, torch::Tensor()).view({B, -1});
}

torch::Tensor TransformerImpl::decode_step_paged(const torch::Tensor& ids, const torch::Tensor& positions,
                                                 PagedKV& cache, int64_t span) {
  const ModelConfig& c = config_;
  check_paged_step(c, head_, ids, positions, cache, span);
  QUARTET_CHECK(!decode_needs_host_length(cache.table.size(1) * cache.block_size),
                "decode_step_paged: dynamic rotary scaling beyond max_position_embeddings is not supported");
  const int64_t B = ids.size(0);
  const auto dev = ids.device();
  const auto dtype = impl_->base->embed->weight.scalar_type();
  layers::Step step;
  step.paged = &cache;
  step.span = span;
  if (!layers::paged_attention_in_kernel(c, dtype, dev)) {
    std::tie(step.paged_write, step.paged_read) = layers::paged_slots(cache, span);
    layers::set_paged_decode_biases(step, cache.context, c, dtype);
  }
  const auto inv = c.family == Family::gpt2 ? torch::Tensor() : impl_->inv_freq_on(dev);
  auto x = impl_->decode_hidden(step, ids, positions, inv, c);
  return head_output(x, torch::Tensor()).view({B, -1});
}

}  // namespace quartet
