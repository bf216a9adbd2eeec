#pragma once
// What every block of one forward pass (Transformer::hidden_states) or decoding step
// (Transformer::decode_step) shares: rotary tables, masks, the KV cache and how the residual
// stream is carried. Filled by the transformer (and attention_masks.hpp), read by the layers.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "quartet/model/transformer.hpp"

namespace quartet::layers {

struct Step {
  torch::Tensor cos, sin;   // [B, 1, T, rotary_dim] or undefined (learned positions)
  torch::Tensor mask;       // [B, 1, T, S] bool, true = may attend
  // Without a mask: causal attention alone (hidden_states' PaddingLayout), mask undefined.
  bool causal_only = false;
  torch::Tensor sliding_mask;  // the same within the sliding window, for the layers that slide
  KVCache* cache = nullptr;
  int64_t past = 0;         // tokens already in the cache
  // decode_step only: the cache slot of this step's token (one-element device tensor) and the
  // number of slots attended to (mask and sliding_mask stay undefined: see bias).
  torch::Tensor slot;
  int64_t span = 0;
  // decode_step_paged only (slot undefined): the paged cache, and for attention on ATen the
  // pool slot each row writes [B] and the pool slots of its first span slots [B, span] (int64
  // indices into a layer's pool seen as [blocks * block_size, kv_heads, head_dim]).
  PagedKV* paged = nullptr;
  torch::Tensor paged_write, paged_read;
  // decode_step: the masks as additive biases [B * kv_heads, g, span] in the attention's
  // dtype, built once per step for every layer.
  torch::Tensor bias, sliding_bias;
  // decode_step, half-split rotary over whole heads (Llama's): sin with the first half
  // negated, and the index that swaps the halves, so that queries and keys rotate together
  // as x cos + x[swap] sin_signed (the same products and sum as rotate_half, so the same bits).
  torch::Tensor sin_signed, swap_halves;
  // Llama with the decode kernels and no gradients (decode_step, hidden_states): blocks pass the
  // residual stream and their MLP's output on unsummed (BlockImpl::forward_carried).
  bool carry = false;
  // packed_hidden_states: the tokens of several sequences in one row ([1, N]), each attending
  // within itself: cu_seqlens [n + 1] int32 on the device, the lengths on the host, the longest.
  torch::Tensor cu_seqlens;
  std::vector<int64_t> seq_lengths;
  int64_t max_seq = 0;
  // fill_paged only (a packed pass): each packed token's keys and values also go to its pool
  // slot fill_slots[i] of `fill` (int64 [N], indices into a layer's pool seen as
  // [blocks * block_size, kv_heads, head_dim]).
  PagedKV* fill = nullptr;
  torch::Tensor fill_slots;

  bool decoding() const { return slot.defined() || paged != nullptr; }
};

}  // namespace quartet::layers
