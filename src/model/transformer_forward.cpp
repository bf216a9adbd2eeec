// The forward pass over whole sequences (TransformerImpl::hidden_states), with or without a
// KV cache.
#include <torch/types.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "quartet/core/check.hpp"
#include "quartet/model/attention_masks.hpp"
#include "quartet/model/rotary.hpp"
#include "quartet/model/transformer.hpp"
#include "quartet/model/transformer_state.hpp"

namespace quartet {

namespace {

using layers::Step;

void check_pass(const ModelConfig& c, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                const KVCache* cache) {
  QUARTET_CHECK(input_ids.dim() == 2, "Transformer: input_ids must be [batch, tokens]");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const int64_t past = cache ? cache->length : 0;
  const int64_t S = past + T;
  QUARTET_CHECK(T > 0, "Transformer: no input tokens");
  QUARTET_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == B && attention_mask.size(1) == S,
                "Transformer: attention_mask must be [" + std::to_string(B) + ", " + std::to_string(S) +
                    "] (cached + new tokens)");
  if (cache) {
    QUARTET_CHECK(static_cast<int64_t>(cache->k.size()) == c.num_layers && cache->k[0].size(0) == B,
                  "Transformer: the KV cache was made for another model or batch size");
    QUARTET_CHECK(S <= cache->max_len, "Transformer: the KV cache holds " + std::to_string(cache->max_len) +
                                           " tokens, " + std::to_string(S) + " needed");
  }
  // Learned positions end at n_positions; past it the lookup would fail naming nothing.
  QUARTET_CHECK(c.family != Family::gpt2 || S <= c.max_positions,
                "Transformer: " + std::to_string(S) + " positions (cached + new tokens), but this gpt2 model has " +
                    std::to_string(c.max_positions) + " (n_positions)");
}

// Left-padded rows (PaddingLayout::around) as causal attention wants them: row r's `lead`
// leading pads move behind it, shifted[r, j] = given[r, (j + lead) mod T], in ids and mask.
// Returns where each of the caller's positions went ([B, T, 1]), to move the outputs back.
torch::Tensor move_leading_padding_behind(const torch::Tensor& input_ids, torch::Tensor& ids, torch::Tensor& mask,
                                          int64_t T, torch::Device dev) {
  auto lead = (mask.ne(0).to(torch::kLong).cumsum(1) == 0).sum(1, /*keepdim=*/true);  // [B, 1]
  auto j = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(dev)).unsqueeze(0);
  auto shift = (j + lead).remainder(T);
  ids = input_ids.gather(1, shift);
  mask = mask.gather(1, shift);
  return (j - lead).remainder(T).unsqueeze(-1);
}

}  // namespace

torch::Tensor TransformerImpl::Impl::embed_at(layers::Step& step, const torch::Tensor& ids, const torch::Tensor& pos,
                                              int64_t length, const ModelConfig& c) {
  auto x = base->embed(ids);
  if (c.family == Family::gpt2) return x + base->wpe(pos);
  const auto dev = ids.device();
  // Dynamic scaling past max_position_embeddings follows the pass's length.
  const torch::Tensor inv =
      c.rope_scaling.type == "dynamic" && length > c.max_positions ? rotary_inv_freq(c, length).to(dev) : inv_freq_on(dev);
  std::tie(step.cos, step.sin) = rotary_cos_sin(inv, pos, x.scalar_type(), c.family == Family::gptj);
  return x;
}

torch::Tensor TransformerImpl::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                             KVCache* cache, PaddingLayout padding) {
  const ModelConfig& c = config_;
  check_pass(c, input_ids, attention_mask, cache);
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const int64_t past = cache ? cache->length : 0;
  const int64_t S = past + T;
  const auto dev = input_ids.device();

  // The caller's promise of where padding lies (PaddingLayout) makes causality the whole mask,
  // for every layer where no window is shorter than the sequence.
  const auto& sl = c.sliding_layers;
  const bool slides = std::find(sl.begin(), sl.end(), true) != sl.end();
  Step step;
  step.causal_only = padding != PaddingLayout::anywhere && !cache && !(slides && S > c.sliding_window);
  torch::Tensor ids = input_ids, mask = attention_mask.to(dev);
  torch::Tensor unshift;  // [B, T, 1]: where each of the caller's positions went
  if (step.causal_only && padding == PaddingLayout::around)
    unshift = move_leading_padding_behind(input_ids, ids, mask, T, dev);

  // Positions count real tokens only, so left padding does not shift them (as HF generate).
  auto valid = mask != 0;
  auto positions = (valid.to(torch::kLong).cumsum(-1) - 1).clamp_min(0);
  auto pos = past ? positions.narrow(1, past, T) : positions;
  layers::set_pass_masks(step, valid, past, S, c, slides, dev);
  step.cache = cache;
  step.past = past;

  auto x = impl_->embed_at(step, ids, pos, S, c);

  const bool recompute = impl_->checkpointing && !cache && torch::GradMode::is_enabled();
  // Without gradients (scoring, the prompt's pass, the old log-probs), Llama blocks carry the
  // residual stream as decoding does (BlockImpl::forward_carried): each residual add fused with
  // the RMSNorm after it, one pass over the activations instead of two.
  step.carry = !recompute && layers::can_carry(impl_->base, x);
  x = impl_->run_blocks(step, x, c.num_layers, recompute);
  if (cache) cache->length = S;
  x = layers::final_norm(impl_->base, x, step.carry, c.norm_eps);
  if (unshift.defined()) x = x.gather(1, unshift.expand({B, T, x.size(-1)}));  // the caller's positions
  return x;
}

torch::Tensor TransformerImpl::packed_hidden_states(const PackedSequences& packed) {
  Step step;
  auto x = impl_->packed_blocks(step, packed, config_);
  return layers::final_norm(impl_->base, x, step.carry, config_.norm_eps);
}

void TransformerImpl::fill_paged(const PackedSequences& packed, PagedKV& cache, const torch::Tensor& slots) {
  const ModelConfig& c = config_;
  QUARTET_CHECK(static_cast<int64_t>(cache.k.size()) == c.num_layers && cache.k[0].size(2) == c.num_kv_heads &&
                    cache.k[0].size(3) == c.head_dim,
                "fill_paged: the paged cache was made for another model");
  QUARTET_CHECK(slots.dim() == 1 && slots.size(0) == packed.tokens() && slots.scalar_type() == torch::kLong &&
                    slots.device() == cache.k[0].device(),
                "fill_paged: slots must be int64 [" + std::to_string(packed.tokens()) + "] on the cache's device");
  torch::NoGradGuard no_grad;
  Step step;
  step.fill = &cache;
  step.fill_slots = slots;
  impl_->packed_blocks(step, packed, c);
}

torch::Tensor TransformerImpl::Impl::packed_blocks(layers::Step& step, const PackedSequences& packed,
                                                   const ModelConfig& c) {
  QUARTET_CHECK(packed.ids.dim() == 2 && packed.ids.size(0) == 1 && packed.tokens() > 0 &&
                    packed.positions.sizes() == packed.ids.sizes() &&
                    packed.cu_seqlens.numel() == packed.sequences() + 1,
                "Transformer: packed sequences need ids and positions [1, N] and cu_seqlens [n + 1]");
  QUARTET_CHECK(c.family != Family::gpt2 || packed.max_len <= c.max_positions,
                "Transformer: a packed sequence of " + std::to_string(packed.max_len) + " tokens, but this gpt2 model has " +
                    std::to_string(c.max_positions) + " positions (n_positions)");
  step.cu_seqlens = packed.cu_seqlens;
  step.seq_lengths = packed.lengths;
  step.max_seq = packed.max_len;
  // Dynamic rotary scaling from the longest sequence, as HF takes it (the largest position + 1).
  auto x = embed_at(step, packed.ids, packed.positions, packed.max_len, c);
  const bool recompute = checkpointing && torch::GradMode::is_enabled();
  step.carry = !recompute && layers::can_carry(base, x);
  return run_blocks(step, x, c.num_layers, recompute);
}

}  // namespace quartet
