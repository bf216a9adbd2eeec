#pragma once
// The attention masks of a forward pass and the additive biases of a decoding step, built once
// per pass or step into its Step for every layer (sliding-window layers get their own).
#include <torch/types.h>

#include <cstdint>

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

}  // namespace quartet::layers
