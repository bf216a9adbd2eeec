#include "quartet/model/attention_masks.hpp"

#include <torch/torch.h>

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

void set_decode_biases(Step& step, const torch::Tensor& key_valid, int64_t B, const ModelConfig& c,
                       torch::ScalarType dtype, torch::Device dev) {
  const int64_t span = step.span;
  const auto mask = key_valid.narrow(1, 0, span).view({B, 1, 1, span});
  torch::Tensor sliding_mask;
  const auto& sl = c.sliding_layers;
  if (std::find(sl.begin(), sl.end(), true) != sl.end()) {
    auto k_slot = torch::arange(span, torch::TensorOptions().dtype(torch::kLong).device(dev));
    sliding_mask = mask & ((step.slot - k_slot) < c.sliding_window).view({1, 1, 1, span});
  }
  const int64_t g = c.num_heads / c.num_kv_heads;
  const auto bias_dtype = c.family == Family::gptj ? torch::kFloat32 : dtype;
  auto to_bias = [&](const torch::Tensor& m) {
    return torch::zeros({B, 1, 1, span}, m.options().dtype(bias_dtype))
        .masked_fill_(m.logical_not(), -std::numeric_limits<float>::infinity())
        .expand({B, c.num_kv_heads, g, span})
        .reshape({B * c.num_kv_heads, g, span});
  };
  step.bias = to_bias(mask);
  if (sliding_mask.defined()) step.sliding_bias = to_bias(sliding_mask);
}

}  // namespace quartet::layers
