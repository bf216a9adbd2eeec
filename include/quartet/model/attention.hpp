#pragma once
// Self-attention of the four families (Llama/Qwen2/Qwen3/Mistral, GPT-2, GPT-J, GPT-NeoX) under
// Hugging Face's parameter names: the whole-sequence path on SDPA (with the KV cache when there
// is one) and one decoding step's paths over a preallocated cache (decode_step). Qwen3's
// q_norm and k_norm normalise each query and key head before the rotation; its decoding steps
// take ATen's rotation and cache writes (the fused rotary kernels know no norm), and quartet's
// attention kernel over the cache like the other families.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "quartet/model/forward_step.hpp"
#include "quartet/model/layers.hpp"
#include "quartet/model/model_config.hpp"

namespace quartet::layers {

// Whether a paged decoding step (decode_step_paged) of this model in `dtype` on `dev` runs its
// attention in attend_paged_qkv's kernel (then the step needs no slot indices or biases).
bool paged_attention_in_kernel(const ModelConfig& c, torch::ScalarType dtype, torch::Device dev);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const Build& b);

  // x [B, T, hidden] -> [B, T, hidden], with the step's rotary tables, masks and cache.
  torch::Tensor forward(const torch::Tensor& x, const Step& s, int64_t layer);

 private:
  torch::Tensor project_out(const torch::Tensor& out);

  // One decoding step (x [B, 1, hidden]). A step moves little data per kernel, so its time is
  // mostly kernel count: where the projections' weights lie back to back (packed or sharded
  // parameters, without biases between them) q, k and v come from one product, and Llama's
  // queries and keys rotate together in four kernels instead of ten.
  // Undefined when the weights are not fused; forward() then takes the general path.
  torch::Tensor decode_fused(const torch::Tensor& x, const Step& s, int64_t layer);
  // decode_fused's general part: the fused product's heads [B, nh + 2 nkv, 1, hd] (queries,
  // keys and values at q_at, k_at, v_at) normed and rotated as the model does, then attended.
  torch::Tensor decode_heads(const torch::Tensor& heads, const Step& s, int64_t layer, int64_t q_at, int64_t k_at,
                             int64_t v_at);

  // One new token per row (decode_step): its keys and values go into the cache at s.slot with
  // index_copy_ (the slot is a device tensor, so a captured graph replays at the next slot),
  // then attention over the first s.span slots. No repeat_kv copy of the cache, which would
  // cost more bandwidth than the attention itself.
  torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const Step& s, int64_t layer);

  // Packed sequences (Step::cu_seqlens): q [1, heads, N, hd], k and v [1, kv_heads, N, hd],
  // each sequence attending causally within itself; [1, N, heads * hd] before o_proj.
  torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const Step& s, int64_t layer);

  // Keys and values [M, kv_heads, hd] into this layer's pool of a paged cache at `slots` (int64
  // [M] into the pool seen as [blocks * block_size, kv_heads, hd]): a paged step's token on ATen,
  // a packed pass's prompt tokens (Step::fill).
  void write_pool(const PagedKV& cache, int64_t layer, const torch::Tensor& slots, const torch::Tensor& k,
                  const torch::Tensor& v);

  // q [.., heads, head_dim] and k through q_norm and k_norm where the model has them (Qwen3).
  torch::Tensor norm_q(const torch::Tensor& q);
  torch::Tensor norm_k(const torch::Tensor& k);

  // A decoding step's additive mask for this layer (sliding-window layers have their own) and
  // its attention's scale, shared by attend_cached and the fused kernel of decode_fused.
  const torch::Tensor& step_bias(const Step& s, int64_t layer) const;
  double decode_scale() const;

  // The attention of one decoding step over the cache's first s.span slots (this step's keys
  // and values already written): q [B * nkv, g, hd], the g query heads of each KV head as rows.
  torch::Tensor attend_cached(const torch::Tensor& q, int64_t B, const Step& s, int64_t layer);
  // A paged step on ATen (Step::paged): keys and values written through the block table, the
  // rows' first s.span slots gathered, then attend_over.
  torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const Step& s, int64_t layer);
  // q [B * nkv, g, hd] over keys and values [B, nkv, S, hd] with the additive bias
  // [B * nkv, g, S]: [B, 1, hidden] after the output projection.
  torch::Tensor attend_over(const torch::Tensor& q, torch::Tensor keys, torch::Tensor values,
                            const torch::Tensor& bias, int64_t B);
  int64_t sliding_window_of(int64_t layer) const;  // 0 for a layer that does not slide

  ModelConfig c_;
  Dense q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr}, qkv_{nullptr};
  Norm q_norm_{nullptr}, k_norm_{nullptr};
  Conv1D c_attn_{nullptr}, c_proj_{nullptr};
};
TORCH_MODULE(Attention);

}  // namespace quartet::layers
