#include "quartet/model/attention_masks.hpp"

#include <torch/types.h>

#include <algorithm>
#include <limits>

namespace quartet::layers {

void set_pass_masks(Step& step, const torch::Tensor& valid, int64_t past, int64_t S, const ModelConfig& c,
                    bool slides, torch::Device dev) {
  auto q_slot = torch::arange(past, S, torch::TensorOptions().dtype(torch::kLong).device(dev));
  auto k_slot = torch::arange(S, torch::TensorOptions().dtype(torch::kLong).device(dev));
  if (!step.causal_only) {
    auto causal = k_slot.unsqueeze(0) <= q_slot.unsqueeze(1);  // [T, S]
    auto self = k_slot.unsqueeze(0) == q_slot.unsqueeze(1);
    step.mask = (causal.unsqueeze(0) & (valid.unsqueeze(1) | self.unsqueeze(0))).unsqueeze(1);  // [B,1,T,S]
  }
  // Sliding layers see only keys fewer than sliding_window slots back, as HF's masking_utils
  // (kv_idx > q_idx - window over cache slots; left padding sits before the real tokens, so
  // slots and positions agree on distances). The cache keeps every slot; this mask limits it.
  if (slides && !step.causal_only) {
    if (S <= c.sliding_window) {
      step.sliding_mask = step.mask;  // no query is a window's length past any key
    } else {
      auto near = (q_slot.unsqueeze(1) - k_slot.unsqueeze(0)) < c.sliding_window;  // [T, S]
      step.sliding_mask = step.mask & near.unsqueeze(0).unsqueeze(0);
    }
  }
}

namespace {

// Bool masks [B, span] as the attention's additive biases [B * kv_heads, g, span].
torch::Tensor as_bias(const torch::Tensor& mask, const ModelConfig& c, torch::ScalarType dtype) {
  const int64_t B = mask.size(0), span = mask.size(-1), g = c.num_heads / c.num_kv_heads;
  const auto bias_dtype = c.family == Family::gptj ? torch::kFloat32 : dtype;
  return torch::zeros({B, 1, 1, span}, mask.options().dtype(bias_dtype))
      .masked_fill_(mask.view({B, 1, 1, span}).logical_not(), -std::numeric_limits<float>::infinity())
      .expand({B, c.num_kv_heads, g, span})
      .reshape({B * c.num_kv_heads, g, span});
}

bool any_sliding(const ModelConfig& c) {
  const auto& sl = c.sliding_layers;
  return std::find(sl.begin(), sl.end(), true) != sl.end();
}

}  // namespace

void set_decode_biases(Step& step, const torch::Tensor& key_valid, int64_t B, const ModelConfig& c,
                       torch::ScalarType dtype, torch::Device dev) {
  const int64_t span = step.span;
  const auto mask = key_valid.narrow(1, 0, span).view({B, span});
  step.bias = as_bias(mask, c, dtype);
  if (any_sliding(c)) {
    auto k_slot = torch::arange(span, torch::TensorOptions().dtype(torch::kLong).device(dev));
    step.sliding_bias = as_bias(mask & ((step.slot - k_slot) < c.sliding_window).view({1, span}), c, dtype);
  }
}

std::pair<torch::Tensor, torch::Tensor> paged_slots(const PagedKV& cache, int64_t span) {
  const int64_t bs = cache.block_size;
  const auto table = cache.table.to(torch::kLong);
  auto slot_of = [&](const torch::Tensor& s) {  // s [B, n] slots of the rows, within their tables
    return table.gather(1, torch::div(s, bs, "floor")) * bs + torch::remainder(s, bs);
  };
  const auto& context = cache.context;
  const auto write = torch::where(context > 0, slot_of((context - 1).clamp_min(0).view({-1, 1})).view({-1}), 0);
  const auto slots = torch::arange(span, context.options()).view({1, span}).expand({table.size(0), span});
  return {write, slot_of(slots)};
}

void set_paged_decode_biases(Step& step, const torch::Tensor& context, const ModelConfig& c, torch::ScalarType dtype) {
  const int64_t span = step.span;
  const auto k_slot = torch::arange(span, context.options()).view({1, span});
  const auto seen = context.clamp_min(1).view({-1, 1});
  const auto mask = k_slot < seen;
  step.bias = as_bias(mask, c, dtype);
  if (any_sliding(c)) step.sliding_bias = as_bias(mask & (k_slot >= seen - c.sliding_window), c, dtype);
}

}  // namespace quartet::layers
