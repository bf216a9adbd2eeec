#pragma once
// The attention masks of a forward pass and the additive biases of a decoding step, built once
// per pass or step into its Step for every layer (sliding-window layers get their own).
#include <torch/types.h>

#include <cstdint>
#include <utility>

#include "quartet/model/forward_step.hpp"
#include "quartet/model/model_config.hpp"

namespace quartet::layers {

// A pass of T new tokens after `past` cached ones (S = past + T slots), valid [B, S] true for
// real tokens. Unless step.causal_only: step.mask [B, 1, T, S], causal over absolute slots,
// keys limited to real tokens, every query also seeing its own slot so that padding rows are
// never fully masked (SDPA would return NaN there); and, where a layer slides (`slides`),
// step.sliding_mask. The slot indices are made on `dev`.
void set_pass_masks(Step& step, const torch::Tensor& valid, int64_t past, int64_t S, const ModelConfig& c,
                    bool slides, torch::Device dev);

// A decoding step of B rows over step.span slots (step.slot set): step.bias, and where a layer
// slides step.sliding_bias, from key_valid [B, >= span] as additive biases
// [B * kv_heads, g, span] in the attention's dtype (float32 for GPT-J, else `dtype`).
void set_decode_biases(Step& step, const torch::Tensor& key_valid, int64_t B, const ModelConfig& c,
                       torch::ScalarType dtype, torch::Device dev);

// A paged decoding step (decode_step_paged) over step.span slots: the same biases from each
// row's context [B] (slots below it visible; an idle row sees its scratch slot 0, so that its
// softmax stays finite); sliding layers see the last sliding_window of them.
// A paged step on ATen: the pool slot each row writes [B] (the scratch slot 0 for an idle row,
// whose table may still name blocks it shares) and the pool slots of its first span slots
// [B, span], as int64 indices into a layer's pool seen as [blocks * block_size, kv_heads, hd].
std::pair<torch::Tensor, torch::Tensor> paged_slots(const PagedKV& cache, int64_t span);

void set_paged_decode_biases(Step& step, const torch::Tensor& context, const ModelConfig& c, torch::ScalarType dtype);

}  // namespace quartet::layers
