#include "quartet/model/attention.hpp"

#include <torch/types.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "quartet/model/attention_masks.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/packed_linear.hpp"
#include "quartet/model/rotary.hpp"

namespace quartet::layers {

bool paged_attention_in_kernel(const ModelConfig& c, torch::ScalarType dtype, torch::Device dev) {
  // decode_fused's kernel branch: Llama without q/k norms or biases, rotating whole heads.
  return c.family == Family::llama && !c.qk_norm && !c.attention_bias && c.rotary_dim == c.head_dim && dev.is_cuda() &&
         decode_kernels_enabled() && decode_attention_enabled() &&
         attend_paged_supports(dtype, c.num_heads / c.num_kv_heads, c.head_dim);
}

namespace {

// repeat_kv: k or v [B, nkv, S, hd] to [B, nkv * g, S, hd], kv head j serving query heads
// j*g .. j*g+g-1.
torch::Tensor repeat_kv(const torch::Tensor& t, int64_t g) {
  const int64_t B = t.size(0), nkv = t.size(1), S = t.size(2), hd = t.size(3);
  return t.unsqueeze(2).expand({B, nkv, g, S, hd}).reshape({B, nkv * g, S, hd});
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& c, const Build& b) : c_(c) {
  const int64_t h = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  switch (c.family) {
    case Family::llama: {
      // Llama's and Qwen3's attention_bias: q, k, v and o; Qwen2: q, k and v always.
      const bool all_bias = (c.model_type == "llama" || c.model_type == "qwen3") && c.attention_bias;
      const bool qkv_bias = c.model_type == "qwen2" || all_bias;
      q_ = register_module("q_proj", Dense(h, qd, qkv_bias, b));
      k_ = register_module("k_proj", Dense(h, kvd, qkv_bias, b));
      v_ = register_module("v_proj", Dense(h, kvd, qkv_bias, b));
      o_ = register_module("o_proj", Dense(qd, h, all_bias, b));
      // After o_proj, as HF registers them: q, k and v stay adjacent in the packed block.
      if (c.qk_norm) {
        q_norm_ = register_module("q_norm", Norm(c.head_dim, c.norm_eps, true, b));
        k_norm_ = register_module("k_norm", Norm(c.head_dim, c.norm_eps, true, b));
      }
      break;
    }
    case Family::gpt2:
      c_attn_ = register_module("c_attn", Conv1D(h, 3 * h, b));
      c_proj_ = register_module("c_proj", Conv1D(h, h, b));
      break;
    case Family::gptj:
      k_ = register_module("k_proj", Dense(h, h, false, b));
      v_ = register_module("v_proj", Dense(h, h, false, b));
      q_ = register_module("q_proj", Dense(h, h, false, b));
      o_ = register_module("out_proj", Dense(h, h, false, b));
      break;
    case Family::gpt_neox:
      qkv_ = register_module("query_key_value", Dense(h, 3 * h, c.attention_bias, b));
      o_ = register_module("dense", Dense(h, h, c.attention_bias, b));
      break;
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const Step& s, int64_t layer) {
  if (s.decoding()) {
    auto fused = decode_fused(x, s, layer);
    if (fused.defined()) return fused;
  }
  const int64_t B = x.size(0), T = x.size(1), nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  torch::Tensor q, k, v;
  if (c_.family == Family::gpt2) {
    auto parts = c_attn_(x).split(c_.hidden_size, 2);
    q = parts[0].view({B, T, nh, hd}).transpose(1, 2);
    k = parts[1].view({B, T, nh, hd}).transpose(1, 2);
    v = parts[2].view({B, T, nh, hd}).transpose(1, 2);
  } else if (c_.family == Family::gpt_neox) {
    // NeoX fuses per head: [q_h, k_h, v_h] for head 0, then head 1, ...
    auto parts = qkv_(x).view({B, T, nh, 3 * hd}).transpose(1, 2).chunk(3, -1);
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    // On the GPU, Llama's q, k and v from one product where their weights lie back to back
    // (model/packed_linear.hpp). The CPU keeps three, as the reference outputs were made.
    std::vector<torch::Tensor> qkv;
    if (c_.family == Family::llama && x.is_cuda() && !q_->bias.defined() && packed_products_enabled())
      qkv = packed_linear(x, {q_->weight, k_->weight, v_->weight}, /*split=*/true);
    if (qkv.empty()) qkv = {q_(x), k_(x), v_(x)};
    q = norm_q(qkv[0].view({B, T, nh, hd})).transpose(1, 2);
    k = norm_k(qkv[1].view({B, T, nkv, hd})).transpose(1, 2);
    v = qkv[2].view({B, T, nkv, hd}).transpose(1, 2);
  }
  if (s.cos.defined()) {
    const bool interleaved = c_.family == Family::gptj;
    q = apply_rotary(q, s.cos, s.sin, interleaved);
    k = apply_rotary(k, s.cos, s.sin, interleaved);
  }
  if (s.decoding()) return decode_attention(q, k, v, s, layer);  // a decoding step without fused weights
  if (s.cu_seqlens.defined()) {
    if (s.fill)  // [1, nkv, N, hd] -> [N, nkv, hd]
      write_pool(*s.fill, layer, s.fill_slots, k.squeeze(0).transpose(0, 1), v.squeeze(0).transpose(0, 1));
    return project_out(packed_attention(q, k, v, s, layer));
  }
  if (s.cache) {
    auto& ck = s.cache->k[static_cast<size_t>(layer)];
    auto& cv = s.cache->v[static_cast<size_t>(layer)];
    ck.narrow(2, s.past, T).copy_(k);
    cv.narrow(2, s.past, T).copy_(v);
    k = ck.narrow(2, 0, s.past + T);
    v = cv.narrow(2, 0, s.past + T);
  }
  // GPT-J's attention runs in float32 whatever the model's dtype, as HF's GPTJAttention
  // does (it upcasts q and k): GPT-J checkpoints were trained that way.
  const bool fp32_attention = c_.family == Family::gptj && (q.scalar_type() == torch::kBFloat16 ||
                                                             q.scalar_type() == torch::kHalf);
  // Grouped queries without a cache, in half precision on CUDA: cuDNN's fused attention takes
  // the fewer key/value heads itself (enable_gqa), which spares the repeated copies and, in
  // training, their backward's sums over each group. Elsewhere the heads are repeated first:
  // the masked memory-efficient kernel (float32) refuses unequal head counts, and a refusal
  // falls back to the unfused math path.
  const bool native_gqa = nkv != nh && !s.cache && q.is_cuda() && !fp32_attention && hd <= 128 &&
                          (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf);
  if (nkv != nh && !native_gqa) {
    k = repeat_kv(k, nh / nkv);
    v = repeat_kv(v, nh / nkv);
  }
  const torch::Tensor& mask = c_.sliding_layers[static_cast<size_t>(layer)] ? s.sliding_mask : s.mask;
  const bool is_causal = s.causal_only;  // then mask is undefined, and SDPA must get none
  const std::optional<torch::Tensor> attn_mask = mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt;
  auto out = fp32_attention
                 ? at::scaled_dot_product_attention(q.to(torch::kFloat), k.to(torch::kFloat),
                                                    v.to(torch::kFloat), attn_mask, 0.0, is_causal,
                                                    1.0 / std::sqrt(static_cast<double>(hd)))
                       .to(q.scalar_type())
                 : at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal,
                                                    1.0 / std::sqrt(static_cast<double>(hd)), native_gqa);
  out = out.transpose(1, 2).reshape({B, T, nh * hd});
  return project_out(out);
}

torch::Tensor AttentionImpl::packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const Step& s, int64_t layer) {
  const int64_t N = q.size(2), nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Sliding layers: keys fewer than sliding_window positions back (set_pass_masks' rule).
  const bool slides = c_.sliding_layers[static_cast<size_t>(layer)] && s.max_seq > c_.sliding_window;
  const bool half = q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf;
  if (q.is_cuda() && half && c_.family != Family::gptj && hd <= 256 && hd % 8 == 0) {
    // FlashAttention's varlen kernel: [N, heads, hd] with the sequences' offsets; it takes
    // fewer key/value heads itself, and has its own backward.
    auto heads = [](const torch::Tensor& t) { return t.squeeze(0).transpose(0, 1).contiguous(); };
    const std::optional<int64_t> left = slides ? std::optional<int64_t>(c_.sliding_window - 1) : std::nullopt;
    const std::optional<int64_t> right = slides ? std::optional<int64_t>(0) : std::nullopt;
    auto out = std::get<0>(at::_flash_attention_forward(heads(q), heads(k), heads(v), s.cu_seqlens, s.cu_seqlens,
                                                        s.max_seq, s.max_seq, 0.0, /*is_causal=*/true,
                                                        /*return_debug_mask=*/false, scale, left, right));
    return out.reshape({1, N, nh * hd});
  }
  // Elsewhere (the CPU, float32, GPT-J's float32 attention): SDPA on each sequence alone.
  const bool fp32_attention = c_.family == Family::gptj && half;
  std::vector<torch::Tensor> outs;
  int64_t start = 0;
  for (int64_t n : s.seq_lengths) {
    auto qs = q.narrow(2, start, n), ks = k.narrow(2, start, n), vs = v.narrow(2, start, n);
    start += n;
    if (nkv != nh) {
      ks = repeat_kv(ks, nh / nkv);
      vs = repeat_kv(vs, nh / nkv);
    }
    std::optional<torch::Tensor> mask;
    if (slides && n > c_.sliding_window) {
      auto i = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
      auto d = i.unsqueeze(1) - i.unsqueeze(0);  // query minus key position
      mask = (d >= 0).logical_and(d < c_.sliding_window);
    }
    if (fp32_attention) {
      qs = qs.to(torch::kFloat);
      ks = ks.to(torch::kFloat);
      vs = vs.to(torch::kFloat);
    }
    outs.push_back(at::scaled_dot_product_attention(qs, ks, vs, mask, 0.0, /*is_causal=*/!mask.has_value(), scale)
                       .to(q.scalar_type()));
  }
  return torch::cat(outs, 2).transpose(1, 2).reshape({1, N, nh * hd});
}

void AttentionImpl::write_pool(const PagedKV& cache, int64_t layer, const torch::Tensor& slots, const torch::Tensor& k,
                               const torch::Tensor& v) {
  const int64_t nkv = c_.num_kv_heads, hd = c_.head_dim;
  const auto l = static_cast<size_t>(layer);
  cache.k[l].view({-1, nkv, hd}).index_copy_(0, slots, k);
  cache.v[l].view({-1, nkv, hd}).index_copy_(0, slots, v);
}

torch::Tensor AttentionImpl::norm_q(const torch::Tensor& q) { return q_norm_ ? q_norm_(q) : q; }

torch::Tensor AttentionImpl::norm_k(const torch::Tensor& k) { return k_norm_ ? k_norm_(k) : k; }

torch::Tensor AttentionImpl::project_out(const torch::Tensor& out) {
  return c_.family == Family::gpt2 ? c_proj_(out) : o_(out);
}

torch::Tensor AttentionImpl::decode_fused(const torch::Tensor& x, const Step& s, int64_t layer) {
  const int64_t B = x.size(0), nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  torch::Tensor w;
  int64_t q_at = 0, k_at = nh, v_at = nh + nkv;  // heads of the fused product
  if (!torch::GradMode::is_enabled() && q_ && !q_->bias.defined()) {
    if (c_.family == Family::llama) {
      w = adjacent_rows({q_->weight, k_->weight, v_->weight});
    } else if (c_.family == Family::gptj) {  // registered (and so packed) k, v, q
      w = adjacent_rows({k_->weight, v_->weight, q_->weight});
      k_at = 0, v_at = nkv, q_at = 2 * nkv;
    }
  }
  if (!w.defined()) return {};
  // The fused kernels rotate the projections as they come: not for Qwen3, whose heads are
  // normalised first (below, on ATen's operations).
  if (c_.family == Family::llama && !c_.qk_norm && s.sin_signed.defined() && decode_kernels_for(x)) {
    // One kernel rotates queries and keys, lays the queries out for attend_cached and writes
    // keys and values into the cache: the same bits as the ATen path below, in 1 kernel of 8.
    auto qkv = torch::linear(x, w).view({B, (nh + 2 * nkv) * hd});
    if (s.paged) {
      // Rotation, the cache write and the attention through the block table in one kernel.
      if (paged_attention_in_kernel(c_, qkv.scalar_type(), qkv.device())) {
        const auto l = static_cast<size_t>(layer);
        auto out = attend_paged_qkv(qkv, s.cos, s.sin_signed, s.paged->k[l], s.paged->v[l], s.paged->table,
                                    s.paged->context, s.span, decode_scale(), nh, nkv, sliding_window_of(layer));
        return project_out(out.view({B, 1, nh * hd}));
      }
      return decode_heads(qkv.view({B, nh + 2 * nkv, 1, hd}), s, layer, q_at, k_at, v_at);
    }
    if (decode_qkv_fused_enabled() && decode_attention_uses_kernel(qkv.scalar_type(), nh / nkv, hd) &&
        attend_decode_qkv_supports(qkv.scalar_type(), nh / nkv, hd)) {
      // That kernel and the attention's in one launch: the same bits (model/decode_kernels.hpp).
      auto out = attend_decode_qkv(qkv, s.cos, s.sin_signed, s.slot, s.cache->k[static_cast<size_t>(layer)],
                                   s.cache->v[static_cast<size_t>(layer)], step_bias(s, layer), s.span,
                                   decode_scale(), nh, nkv);
      return project_out(out.view({B, 1, nh * hd}));
    }
    auto q = torch::empty({B, nh, hd}, qkv.options());
    qkv_to_cache(qkv, s.cos, s.sin_signed, s.slot, q, s.cache->k[static_cast<size_t>(layer)],
                 s.cache->v[static_cast<size_t>(layer)], nh, nkv, hd);
    return attend_cached(q.view({B * nkv, nh / nkv, hd}), B, s, layer);
  }
  // T = 1, so [B, heads, 1, hd] is a view of the product [B, 1, heads * hd].
  return decode_heads(torch::linear(x, w).view({B, nh + 2 * nkv, 1, hd}), s, layer, q_at, k_at, v_at);
}

torch::Tensor AttentionImpl::decode_heads(const torch::Tensor& heads, const Step& s, int64_t layer, int64_t q_at,
                                          int64_t k_at, int64_t v_at) {
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads;
  torch::Tensor q, k;
  auto v = heads.narrow(1, v_at, nkv);
  if (s.sin_signed.defined() && k_at == q_at + nh) {
    auto qk = c_.qk_norm ? torch::cat({norm_q(heads.narrow(1, q_at, nh)), norm_k(heads.narrow(1, k_at, nkv))}, 1)
                         : heads.narrow(1, q_at, nh + nkv);
    auto rot = qk * s.cos + qk.index_select(3, s.swap_halves) * s.sin_signed;
    q = rot.narrow(1, 0, nh);
    k = rot.narrow(1, nh, nkv);
  } else {
    q = norm_q(heads.narrow(1, q_at, nh));
    k = norm_k(heads.narrow(1, k_at, nkv));
    if (s.cos.defined()) {
      const bool interleaved = c_.family == Family::gptj;
      q = apply_rotary(q, s.cos, s.sin, interleaved);
      k = apply_rotary(k, s.cos, s.sin, interleaved);
    }
  }
  return decode_attention(q, k, v, s, layer);
}

torch::Tensor AttentionImpl::decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const Step& s, int64_t layer) {
  if (s.paged) return paged_attention(q, k, v, s, layer);
  const int64_t B = q.size(0), nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  auto ck = s.cache->k[static_cast<size_t>(layer)].narrow(0, 0, B);
  auto cv = s.cache->v[static_cast<size_t>(layer)].narrow(0, 0, B);
  ck.index_copy_(2, s.slot, k);
  cv.index_copy_(2, s.slot, v);
  // Grouped-query attention without repeating the cache: the g query heads that share a KV
  // head become g query rows of that head (all at the same position, so one mask row serves
  // them all), and each cached key and value is read once.
  return attend_cached(q.reshape({B * nkv, nh / nkv, hd}), B, s, layer);
}

const torch::Tensor& AttentionImpl::step_bias(const Step& s, int64_t layer) const {
  return c_.sliding_layers[static_cast<size_t>(layer)] ? s.sliding_bias : s.bias;
}

double AttentionImpl::decode_scale() const {
  return 1.0 / std::sqrt(static_cast<double>(c_.head_dim));
}

torch::Tensor AttentionImpl::attend_cached(const torch::Tensor& q, int64_t B, const Step& s, int64_t layer) {
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  const double scale = decode_scale();
  const auto& bias = step_bias(s, layer);
  if (decode_kernels_for(q) && decode_attention_uses_kernel(q.scalar_type(), nh / nkv, hd)) {
    // One kernel reads each cached key and value once and keeps scores and probabilities in
    // float32 (GPT-J's float32 attention included); the ATen path below takes three. Where
    // it takes it: model/decode_kernels.hpp.
    // The slots after this step's (s.slot) are masked for every row and not read.
    auto out = attend_decode(q.reshape({B, nh, hd}).contiguous(), s.cache->k[static_cast<size_t>(layer)],
                             s.cache->v[static_cast<size_t>(layer)], bias, s.span, scale, 0, s.slot);
    return project_out(out.view({B, 1, nh * hd}));
  }
  return attend_over(q, s.cache->k[static_cast<size_t>(layer)].narrow(0, 0, B).narrow(2, 0, s.span),
                     s.cache->v[static_cast<size_t>(layer)].narrow(0, 0, B).narrow(2, 0, s.span), bias, B);
}

torch::Tensor AttentionImpl::paged_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const Step& s, int64_t layer) {
  const int64_t B = q.size(0), nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim, S = s.span;
  const PagedKV& cache = *s.paged;
  // The step normally brings the slots and biases (decode_step_paged); a layer that did not take
  // the kernel the step expected makes its own.
  torch::Tensor write = s.paged_write, read = s.paged_read;
  if (!write.defined()) std::tie(write, read) = paged_slots(cache, S);
  torch::Tensor bias = step_bias(s, layer);
  if (!bias.defined()) {
    Step own;
    own.span = S;
    set_paged_decode_biases(own, cache.context, c_, q.scalar_type());
    bias = step_bias(own, layer);
  }
  write_pool(cache, layer, write, k.reshape({B, nkv, hd}), v.reshape({B, nkv, hd}));
  // The rows' slots gathered into [B, nkv, span, hd], as the contiguous cache lies.
  auto gather = [&](const torch::Tensor& pool) {
    return pool.view({-1, nkv, hd}).index_select(0, read.reshape({-1})).view({B, S, nkv, hd}).permute({0, 2, 1, 3});
  };
  const auto l = static_cast<size_t>(layer);
  return attend_over(q.reshape({B * nkv, nh / nkv, hd}), gather(cache.k[l]), gather(cache.v[l]), bias, B);
}

int64_t AttentionImpl::sliding_window_of(int64_t layer) const {
  return c_.sliding_layers[static_cast<size_t>(layer)] ? c_.sliding_window : 0;
}

torch::Tensor AttentionImpl::attend_over(const torch::Tensor& q, torch::Tensor keys, torch::Tensor values,
                                         const torch::Tensor& bias, int64_t B) {
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  const double scale = decode_scale();
  auto qg = q;
  const auto dtype = q.scalar_type();
  // GPT-J attends in float32, as in forward().
  if (c_.family == Family::gptj && dtype != torch::kFloat32) {
    qg = qg.to(torch::kFloat32);
    keys = keys.to(torch::kFloat32);
    values = values.to(torch::kFloat32);
  }
  // Batched matmuls: scores = bias + scale q k^T in one baddbmm (the step's additive mask),
  // softmax in float32, then probabilities times values. Measured against the fused SDPA
  // kernel (cuDNN's, tiled for 64 query rows where decoding has g): 2.34 against 2.42 ms a
  // step for the 886M benchmark model (docs/tried-and-rejected.md).
  const int64_t g = nh / nkv, S = keys.size(2);
  const auto keys_t = keys.reshape({B * nkv, S, hd}).transpose(1, 2);
  torch::Tensor probs;
  if (decode_kernels_for(qg) && bias.scalar_type() == qg.scalar_type() && bias.is_contiguous()) {
    // The mask added inside the softmax kernel: baddbmm at beta 0 reads no bias (ATen would
    // copy it into the output first, a memcpy per layer). The same bits up to the softmax's
    // order of summation.
    probs = masked_softmax(at::baddbmm(bias, qg, keys_t, 0.0, scale), bias);
  } else {
    auto scores = at::baddbmm(bias, qg, keys_t, 1.0, scale);
    // Softmax in the scores' dtype: the kernel computes in float32 and rounds once, as HF's
    // softmax(dtype=float32).to(dtype) does, in one kernel instead of three.
    probs = scores.softmax(-1);
  }
  probs = probs.to(values.scalar_type());
  auto out = at::bmm(probs, values.reshape({B * nkv, S, hd})).view({B, nkv, g, hd});
  return project_out(out.to(dtype).reshape({B, 1, nh * hd}));
}

}  // namespace quartet::layers
