#include "quartet/model/transformer.hpp"
#include "quartet/model/weight_map.hpp"

#include <torch/torch.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "quartet/core/check.hpp"
#include "quartet/model/checkpointing.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/rotary.hpp"
#include "quartet/model/packed_linear.hpp"
#include "quartet/model/swiglu_kernel.hpp"

namespace quartet {

const char* head_name(Head head) {
  switch (head) {
    case Head::causal_lm: return "causal_lm";
    case Head::token_value: return "token_value";
    case Head::sequence_reward: return "sequence_reward";
  }
  return "?";
}

std::string architecture_name(const ModelConfig& c, Head head) {
  std::string prefix;
  if (c.model_type == "llama") prefix = "Llama";
  else if (c.model_type == "mistral") prefix = "Mistral";
  else if (c.model_type == "qwen2") prefix = "Qwen2";
  else if (c.model_type == "gpt2") prefix = "GPT2";
  else if (c.model_type == "gptj") prefix = "GPTJ";
  else if (c.model_type == "gpt_neox") prefix = "GPTNeoX";
  QUARTET_CHECK(!prefix.empty(), "model_type '" + c.model_type + "' is not supported");
  switch (head) {
    case Head::causal_lm: return prefix == "GPT2" ? "GPT2LMHeadModel" : prefix + "ForCausalLM";
    case Head::token_value: return prefix + "ForTokenClassification";
    case Head::sequence_reward: return prefix + "ForSequenceClassification";
  }
  return prefix;
}

namespace {

// How parameters are created: where, in which dtype, and whether they get a random init (a
// model about to be loaded skips it).
struct Build {
  torch::TensorOptions options;
  bool init = true;
  double std = 0.02;

  torch::Tensor normal(std::vector<int64_t> shape) const {
    auto t = torch::empty(shape, options);
    if (init) t.normal_(0.0, std);
    return t;
  }
  torch::Tensor filled(std::vector<int64_t> shape, double value) const {
    auto t = torch::empty(shape, options);
    if (init) t.fill_(value);
    return t;
  }
};

// nn.Linear: weight [out, in]. Without a weight it holds only a bias (GPT-J's lm_head.bias when
// the weight is tied to the embedding).
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(int64_t in, int64_t out, bool with_bias, const Build& b, bool with_weight = true) {
    if (with_weight) weight = register_parameter("weight", b.normal({out, in}));
    if (with_bias) bias = register_parameter("bias", b.filled({out}, 0.0));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Dense);

// GPT-2's Conv1D: weight stored [in, out] and applied as x @ W + b, exactly as HF does.
class Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t in, int64_t out, const Build& b) {
    weight = register_parameter("weight", b.normal({in, out}));
    bias = register_parameter("bias", b.filled({out}, 0.0));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(1);
    return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(sizes);
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

// RMSNorm (Llama: float32 statistics, weight applied after casting back) or LayerNorm.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(int64_t n, double eps, bool rms, const Build& b) : eps_(eps), rms_(rms) {
    weight = register_parameter("weight", b.filled({n}, 1.0));
    if (!rms) bias = register_parameter("bias", b.filled({n}, 0.0));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (!rms_) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps_);
    // One fused kernel on CUDA (float32 statistics, as HF's LlamaRMSNorm), instead of the
    // six of the written-out form; HF also rounds to the input dtype before the weight, this
    // rounds once, at the end.
    return at::rms_norm(x, {x.size(-1)}, weight, eps_);
  }
  torch::Tensor weight, bias;

 private:
  double eps_;
  bool rms_;
};
TORCH_MODULE(Norm);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t n, int64_t d, int64_t padding_idx, const Build& b) : padding_idx_(padding_idx) {
    weight = register_parameter("weight", b.normal({n, d}));
    if (b.init && padding_idx >= 0) {
      torch::NoGradGuard no_grad;
      weight[padding_idx].zero_();
    }
  }
  // padding_idx only stops the gradient of the pad row, as nn.Embedding(padding_idx) does.
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids, padding_idx_); }
  torch::Tensor weight;

 private:
  int64_t padding_idx_;
};
TORCH_MODULE(Embedding);

// Puts the parameters of `m` back to back in one buffer, in registration order, as a sharded
// model's flat units already hold them (shard/flat_layout.hpp). Then q/k/v and gate/up lie in
// one matrix that a decoding step multiplies once (adjacent_rows). keep_values = false skips
// the copy, for parameters about to be loaded (their pages stay untouched).
void pack_parameters(torch::nn::Module& m, bool keep_values) {
  auto params = m.parameters(true);
  if (params.empty()) return;
  int64_t total = 0;
  for (const auto& p : params) {
    if (p.scalar_type() != params[0].scalar_type() || p.device() != params[0].device()) return;
    total += p.numel();
  }
  auto flat = torch::empty({total}, params[0].options());
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (auto& p : params) {
    auto view = flat.narrow(0, at, p.numel()).view(p.sizes());
    if (keep_values) view.copy_(p);
    p.set_data(view);
    at += p.numel();
  }
}

// A decoding step on quartet's own device kernels (model/decode_kernels.hpp) rather than ATen's.
bool decode_kernels_for(const torch::Tensor& x) {
  return x.is_cuda() && decode_kernels_enabled() &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32);
}

torch::Tensor activate(const std::string& act, const torch::Tensor& x) {
  if (act == "silu" || act == "swish") return torch::silu(x);
  if (act == "gelu") return torch::gelu(x);
  if (act == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  if (act == "relu") return torch::relu(x);
  // gelu_new, written out as HF's NewGELUActivation does (the fused tanh GELU rounds differently).
  return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
}

// What every block of one forward pass shares.
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
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const Build& b) : c_(c) {
    const int64_t h = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
    switch (c.family) {
      case Family::llama: {
        const bool llama_bias = c.model_type == "llama" && c.attention_bias;
        const bool qkv_bias = c.model_type == "qwen2" || llama_bias;
        q_ = register_module("q_proj", Dense(h, qd, qkv_bias, b));
        k_ = register_module("k_proj", Dense(h, kvd, qkv_bias, b));
        v_ = register_module("v_proj", Dense(h, kvd, qkv_bias, b));
        o_ = register_module("o_proj", Dense(qd, h, llama_bias, b));
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

  torch::Tensor forward(const torch::Tensor& x, const Step& s, int64_t layer) {
    if (s.slot.defined()) {
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
      q = qkv[0].view({B, T, nh, hd}).transpose(1, 2);
      k = qkv[1].view({B, T, nkv, hd}).transpose(1, 2);
      v = qkv[2].view({B, T, nkv, hd}).transpose(1, 2);
    }
    if (s.cos.defined()) {
      const bool interleaved = c_.family == Family::gptj;
      q = apply_rotary(q, s.cos, s.sin, interleaved);
      k = apply_rotary(k, s.cos, s.sin, interleaved);
    }
    if (s.slot.defined()) return decode_attention(q, k, v, s, layer);  // a decoding step without fused weights
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
      // repeat_kv: kv head j serves query heads j*g .. j*g+g-1.
      const int64_t g = nh / nkv, S = k.size(2);
      k = k.unsqueeze(2).expand({B, nkv, g, S, hd}).reshape({B, nh, S, hd});
      v = v.unsqueeze(2).expand({B, nkv, g, S, hd}).reshape({B, nh, S, hd});
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

 private:
  torch::Tensor project_out(const torch::Tensor& out) { return c_.family == Family::gpt2 ? c_proj_(out) : o_(out); }

  // One decoding step (x [B, 1, hidden]). A step moves little data per kernel, so its time is
  // mostly kernel count: where the projections' weights lie back to back (packed or sharded
  // parameters, without biases between them) q, k and v come from one product, and Llama's
  // queries and keys rotate together in four kernels instead of ten.
  // Undefined when the weights are not fused; forward() then takes the general path.
  torch::Tensor decode_fused(const torch::Tensor& x, const Step& s, int64_t layer) {
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
    if (c_.family == Family::llama && s.sin_signed.defined() && decode_kernels_for(x)) {
      // One kernel rotates queries and keys, lays the queries out for attend_cached and writes
      // keys and values into the cache: the same bits as the ATen path below, in 1 kernel of 8.
      auto qkv = torch::linear(x, w).view({B, (nh + 2 * nkv) * hd});
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
    auto heads = torch::linear(x, w).view({B, nh + 2 * nkv, 1, hd});
    torch::Tensor q, k;
    auto v = heads.narrow(1, v_at, nkv);
    if (s.sin_signed.defined() && k_at == q_at + nh) {
      auto qk = heads.narrow(1, q_at, nh + nkv);
      auto rot = qk * s.cos + qk.index_select(3, s.swap_halves) * s.sin_signed;
      q = rot.narrow(1, 0, nh);
      k = rot.narrow(1, nh, nkv);
    } else {
      q = heads.narrow(1, q_at, nh);
      k = heads.narrow(1, k_at, nkv);
      if (s.cos.defined()) {
        const bool interleaved = c_.family == Family::gptj;
        q = apply_rotary(q, s.cos, s.sin, interleaved);
        k = apply_rotary(k, s.cos, s.sin, interleaved);
      }
    }
    return decode_attention(q, k, v, s, layer);
  }

  // One new token per row (decode_step): its keys and values go into the cache at s.slot with
  // index_copy_ (the slot is a device tensor, so a captured graph replays at the next slot),
  // then attention over the first s.span slots. No repeat_kv copy of the cache, which would
  // cost more bandwidth than the attention itself.
  torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const Step& s, int64_t layer) {
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

  // A decoding step's additive mask for this layer (sliding-window layers have their own) and
  // its attention's scale, shared by attend_cached and the fused kernel of decode_fused.
  const torch::Tensor& step_bias(const Step& s, int64_t layer) const {
    return c_.sliding_layers[static_cast<size_t>(layer)] ? s.sliding_bias : s.bias;
  }
  double decode_scale() const { return 1.0 / std::sqrt(static_cast<double>(c_.head_dim)); }

  // The attention of one decoding step over the cache's first s.span slots (this step's keys
  // and values already written): q [B * nkv, g, hd], the g query heads of each KV head as rows.
  torch::Tensor attend_cached(const torch::Tensor& q, int64_t B, const Step& s, int64_t layer) {
    const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
    const double scale = decode_scale();
    const auto& bias = step_bias(s, layer);
    if (decode_kernels_for(q) && decode_attention_uses_kernel(q.scalar_type(), nh / nkv, hd)) {
      // One kernel reads each cached key and value once and keeps scores and probabilities in
      // float32 (GPT-J's float32 attention included); the ATen path below takes three. Where
      // it takes it: model/decode_kernels.hpp.
      // The slots after this step's (s.slot) are masked for every row and not read.
      auto out = attend_decode(q.reshape({B, nh, hd}).contiguous(), s.cache->k[static_cast<size_t>(layer)],
                               s.cache->v[static_cast<size_t>(layer)], bias, s.span, scale, 0, 0, nullptr, s.slot);
      return project_out(out.view({B, 1, nh * hd}));
    }
    auto keys = s.cache->k[static_cast<size_t>(layer)].narrow(0, 0, B).narrow(2, 0, s.span);
    auto values = s.cache->v[static_cast<size_t>(layer)].narrow(0, 0, B).narrow(2, 0, s.span);
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
    const int64_t g = nh / nkv, S = s.span;
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

  ModelConfig c_;
  Dense q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr}, qkv_{nullptr};
  Conv1D c_attn_{nullptr}, c_proj_{nullptr};
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& c, const Build& b) : c_(c) {
    const int64_t h = c.hidden_size, i = c.intermediate_size;
    switch (c.family) {
      case Family::llama:
        gate_ = register_module("gate_proj", Dense(h, i, c.mlp_bias, b));
        up_ = register_module("up_proj", Dense(h, i, c.mlp_bias, b));
        down_ = register_module("down_proj", Dense(i, h, c.mlp_bias, b));
        break;
      case Family::gpt2:
        c_fc_ = register_module("c_fc", Conv1D(h, i, b));
        c_proj_ = register_module("c_proj", Conv1D(i, h, b));
        break;
      case Family::gptj:
        up_ = register_module("fc_in", Dense(h, i, true, b));
        down_ = register_module("fc_out", Dense(i, h, true, b));
        break;
      case Family::gpt_neox:
        up_ = register_module("dense_h_to_4h", Dense(h, i, true, b));
        down_ = register_module("dense_4h_to_h", Dense(i, h, true, b));
        break;
    }
  }
  // decode: a decoding step, which multiplies gate and up at once where their weights lie
  // back to back (see AttentionImpl::decode_fused).
  torch::Tensor forward(const torch::Tensor& x, bool decode = false) {
    if (c_.family == Family::llama) return down_(llama_activation(x, decode));
    if (c_.family == Family::gpt2) return c_proj_(activate(c_.activation, c_fc_(x)));
    return down_(activate(c_.activation, up_(x)));
  }
  // forward() written into out (contiguous, shaped like x): Llama's down projection multiplies
  // straight into it (the same product as forward's), so the residual add can wait for the next
  // block's RMSNorm (BlockImpl::forward_carried).
  void forward_into(const torch::Tensor& x, const torch::Tensor& out, bool decode) {
    if (c_.family == Family::llama && !down_->bias.defined()) {
      const int64_t rows = x.numel() / x.size(-1);
      auto act = llama_activation(x, decode);
      auto dst = out.view({rows, -1});
      at::mm_out(dst, act.reshape({rows, -1}), down_->weight.t());
      return;
    }
    out.copy_(forward(x, decode));
  }

 private:
  // What Llama's down projection multiplies: act(gate(x)) * up(x), gate and up from one
  // product where their weights lie back to back.
  torch::Tensor llama_activation(const torch::Tensor& x, bool decode) {
    if (decode && !torch::GradMode::is_enabled() && !gate_->bias.defined()) {
      auto w = adjacent_rows({gate_->weight, up_->weight});
      if (w.defined()) {
        auto gate_up = torch::linear(x, w);
        if ((c_.activation == "silu" || c_.activation == "swish") && decode_kernels_for(gate_up))
          return silu_mul(gate_up);
        const int64_t i = c_.intermediate_size;
        return activate(c_.activation, gate_up.narrow(-1, 0, i)) * gate_up.narrow(-1, i, i);
      }
    }
    if (c_.activation == "silu" || c_.activation == "swish") {
      if (x.is_cuda() && !gate_->bias.defined() && swiglu_kernel_enabled() && packed_products_enabled()) {
        // Gate and up from one product, SwiGLU on it as it lies (model/packed_linear.hpp).
        auto gate_up = packed_linear(x, {gate_->weight, up_->weight}, /*split=*/false);
        if (!gate_up.empty()) {
          if (swiglu_packed_supports(gate_up[0])) return swiglu_packed(gate_up[0]);
          const int64_t i = c_.intermediate_size;
          return torch::silu(gate_up[0].narrow(-1, 0, i)) * gate_up[0].narrow(-1, i, i);
        }
      }
      auto gate = gate_(x), up = up_(x);
      if (swiglu_kernel_supports(gate, up)) return swiglu(gate, up);
      return torch::silu(gate) * up;
    }
    return activate(c_.activation, gate_(x)) * up_(x);
  }

  ModelConfig c_;
  Dense gate_{nullptr}, up_{nullptr}, down_{nullptr};
  Conv1D c_fc_{nullptr}, c_proj_{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& c, const Build& b) : c_(c) {
    const bool rms = c.family == Family::llama;
    const int64_t h = c.hidden_size;
    switch (c.family) {
      case Family::llama:
        ln1_ = register_module("input_layernorm", Norm(h, c.norm_eps, rms, b));
        attn_ = register_module("self_attn", Attention(c, b));
        ln2_ = register_module("post_attention_layernorm", Norm(h, c.norm_eps, rms, b));
        mlp_ = register_module("mlp", Mlp(c, b));
        break;
      case Family::gpt2:
        ln1_ = register_module("ln_1", Norm(h, c.norm_eps, false, b));
        attn_ = register_module("attn", Attention(c, b));
        ln2_ = register_module("ln_2", Norm(h, c.norm_eps, false, b));
        mlp_ = register_module("mlp", Mlp(c, b));
        break;
      case Family::gptj:
        ln1_ = register_module("ln_1", Norm(h, c.norm_eps, false, b));
        attn_ = register_module("attn", Attention(c, b));
        mlp_ = register_module("mlp", Mlp(c, b));
        break;
      case Family::gpt_neox:
        ln1_ = register_module("input_layernorm", Norm(h, c.norm_eps, false, b));
        ln2_ = register_module("post_attention_layernorm", Norm(h, c.norm_eps, false, b));
        attn_ = register_module("attention", Attention(c, b));
        mlp_ = register_module("mlp", Mlp(c, b));
        break;
    }
  }

  torch::Tensor forward(const torch::Tensor& x, const Step& s, int64_t layer) {
    const bool decode = s.slot.defined();
    if (s.carry) return forward_carried(x, s, layer);
    if (c_.family == Family::gptj) {
      // One LayerNorm feeds both branches.
      auto h = ln1_(x);
      return attn_(h, s, layer) + mlp_->forward(h, decode) + x;
    }
    auto a = attn_(ln1_(x), s, layer);
    if (c_.parallel_residual) return mlp_->forward(ln2_(x), decode) + a + x;  // NeoX use_parallel_residual
    if (decode && c_.family == Family::llama && !torch::GradMode::is_enabled() && decode_kernels_for(x) &&
        x.is_contiguous() && a.is_contiguous() && ln2_->weight.is_contiguous() &&
        ln2_->weight.scalar_type() == x.scalar_type()) {
      // The residual add and the RMSNorm after it in one kernel.
      auto [y, h] = add_rms_norm(x, a, ln2_->weight, c_.norm_eps);
      return y + mlp_->forward(h, decode);
    }
    auto y = x + a;
    return y + mlp_->forward(ln2_(y), decode);
  }

  // A Llama block without gradients, with the decode kernels (Step::carry): x is the embeddings
  // [B, T, H] (first block) or what the block before returned, [2, B, T, H]: the residual stream
  // before its MLP, and the MLP's output. Each residual add is fused with the RMSNorm that follows it
  // (this block's two, and the next block's or the final norm for the MLP's): the same sums as
  // x + a, the norms equal to rounding (model/decode_kernels.hpp), two kernels a block fewer.
  torch::Tensor forward_carried(const torch::Tensor& x, const Step& s, int64_t layer) {
    torch::Tensor residual, h;
    if (x.dim() == 4) {
      std::tie(residual, h) = add_rms_norm(x[0], x[1], ln1_->weight, c_.norm_eps);
    } else {
      residual = x;
      h = ln1_(x);
    }
    auto a = attn_(h, s, layer);
    auto out = torch::empty({2, residual.size(0), residual.size(1), residual.size(2)}, residual.options());
    auto h2 = add_rms_norm(residual, a, ln2_->weight, c_.norm_eps, out[0]).second;
    mlp_->forward_into(h2, out[1], /*decode=*/s.slot.defined());
    return out;
  }

  // Whether decode_step and hidden_states may carry the residual stream as forward_carried does.
  bool can_carry(const torch::Tensor& x) {
    return c_.family == Family::llama && !c_.parallel_residual && decode_kernels_for(x) &&
           !torch::GradMode::is_enabled() && ln1_->weight.scalar_type() == x.scalar_type() &&
           ln2_->weight.scalar_type() == x.scalar_type() && ln1_->weight.is_contiguous() &&
           ln2_->weight.is_contiguous();
  }

 private:
  ModelConfig c_;
  Norm ln1_{nullptr}, ln2_{nullptr};
  Attention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

// The decoder without its head, under the family's base-model prefix.
class BaseImpl : public torch::nn::Module {
 public:
  BaseImpl(const ModelConfig& c, const Build& b) {
    const int64_t h = c.hidden_size;
    const char* layers_name = "layers";
    switch (c.family) {
      case Family::llama: {
        // LlamaModel passes padding_idx=pad_token_id to nn.Embedding.
        int64_t pad = c.pad_token_id && *c.pad_token_id >= 0 && *c.pad_token_id < c.vocab_size ? *c.pad_token_id : -1;
        embed = register_module("embed_tokens", Embedding(c.vocab_size, h, pad, b));
        break;
      }
      case Family::gpt2:
        embed = register_module("wte", Embedding(c.vocab_size, h, -1, b));
        wpe = register_module("wpe", Embedding(c.max_positions, h, -1, b));
        layers_name = "h";
        break;
      case Family::gptj:
        embed = register_module("wte", Embedding(c.vocab_size, h, -1, b));
        layers_name = "h";
        break;
      case Family::gpt_neox:
        embed = register_module("embed_in", Embedding(c.vocab_size, h, -1, b));
        break;
    }
    list = register_module(layers_name, torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      blocks.push_back(Block(c, b));
      list->push_back(blocks.back());
    }
    const char* norm_name = c.family == Family::llama      ? "norm"
                            : c.family == Family::gpt_neox ? "final_layer_norm"
                                                           : "ln_f";
    norm = register_module(norm_name, Norm(h, c.norm_eps, c.family == Family::llama, b));
  }
  Embedding embed{nullptr}, wpe{nullptr};
  torch::nn::ModuleList list{nullptr};
  std::vector<Block> blocks;
  Norm norm{nullptr};
};
TORCH_MODULE(Base);

const char* base_prefix(Family f) {
  switch (f) {
    case Family::llama: return "model";
    case Family::gpt2:
    case Family::gptj: return "transformer";
    case Family::gpt_neox: return "gpt_neox";
  }
  return "model";
}

// POSIX rather than std::filesystem: libtorch.so exports its own copies of std::filesystem's
// free functions, which may bind in place of libstdc++'s (its remove_all crashes).
void make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
      QUARTET_CHECK(false, part + ": cannot create the directory: " + std::strerror(errno));
  }
}

}  // namespace

struct TransformerImpl::Impl {
  Base base{nullptr};
  Dense head{nullptr};          // lm_head / embed_out / score / classifier
  torch::Tensor inv_freq;       // float32, CPU: the master copy
  torch::Tensor inv_freq_dev;   // the copy on the device of the last forward
  torch::Tensor swap_halves_dev;  // decode_step's half-swapping index (Step::swap_halves), there too
  bool checkpointing = false;
  BlockRunner runner;
};

namespace {

// Whether every block and the final norm may carry the residual stream (BlockImpl::forward_carried):
// decode_step, and hidden_states without gradients.
bool can_carry(const Base& base, const torch::Tensor& x) {
  const auto& w = base->norm->weight;
  return x.is_contiguous() && w.scalar_type() == x.scalar_type() && w.is_contiguous() &&
         std::all_of(base->blocks.begin(), base->blocks.end(), [&](Block b) { return b->can_carry(x); });
}

// The final norm; carried, the last block's MLP output is added inside it.
torch::Tensor final_norm(Base& base, const torch::Tensor& x, bool carry, double eps) {
  return carry && x.dim() == 4 ? add_rms_norm(x[0], x[1], base->norm->weight, eps).second : base->norm(x);
}

}  // namespace

TransformerImpl::TransformerImpl(const ModelConfig& config, Head head)
    : TransformerImpl(config, head, torch::TensorOptions(), true) {}

TransformerImpl::TransformerImpl(const ModelConfig& config, Head head, const torch::TensorOptions& options,
                                 bool random_init)
    : impl_(std::make_shared<Impl>()), config_(config), head_(head) {
  config_.complete("model config");
  const ModelConfig& c = config_;
  Build b{options, random_init, c.initializer_range};
  impl_->base = register_module(base_prefix(c.family), Base(c, b));
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
  for (auto& block : impl_->base->blocks) pack_parameters(*block, random_init);
}

void TransformerImpl::set_activation_checkpointing(bool on) { impl_->checkpointing = on; }

void TransformerImpl::set_block_runner(BlockRunner runner) { impl_->runner = std::move(runner); }

std::string TransformerImpl::block_prefix(int64_t layer) const {
  QUARTET_CHECK(layer >= 0 && layer < config_.num_layers, "block_prefix: no layer " + std::to_string(layer));
  const bool h = config_.family == Family::gpt2 || config_.family == Family::gptj;
  return std::string(base_prefix(config_.family)) + (h ? ".h." : ".layers.") + std::to_string(layer) + ".";
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

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                       KVCache* cache) {
  return head_output(hidden_states(input_ids, attention_mask, cache), attention_mask);
}

torch::Tensor TransformerImpl::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                             KVCache* cache, PaddingLayout padding) {
  const ModelConfig& c = config_;
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
  const auto dev = input_ids.device();

  // The caller's promise of where padding lies (PaddingLayout) makes causality the whole mask,
  // for every layer where no window is shorter than the sequence.
  const auto& sl = c.sliding_layers;
  const bool slides = std::find(sl.begin(), sl.end(), true) != sl.end();
  Step step;
  step.causal_only = padding != PaddingLayout::anywhere && !cache && !(slides && S > c.sliding_window);
  torch::Tensor ids = input_ids, mask = attention_mask.to(dev);
  torch::Tensor unshift;  // [B, T, 1]: where each of the caller's positions went
  if (step.causal_only && padding == PaddingLayout::around) {
    // Row r's `lead` leading pads move behind it: shifted[r, j] = given[r, (j + lead) mod T].
    auto lead = (mask.ne(0).to(torch::kLong).cumsum(1) == 0).sum(1, /*keepdim=*/true);  // [B, 1]
    auto j = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(dev)).unsqueeze(0);
    auto shift = (j + lead).remainder(T);
    ids = input_ids.gather(1, shift);
    mask = mask.gather(1, shift);
    unshift = (j - lead).remainder(T).unsqueeze(-1);
  }

  // Positions count real tokens only, so left padding does not shift them (as HF generate).
  auto valid = mask != 0;
  auto positions = (valid.to(torch::kLong).cumsum(-1) - 1).clamp_min(0);
  auto pos = past ? positions.narrow(1, past, T) : positions;

  // Causal over absolute slots, keys limited to real tokens; every query also sees its own
  // slot so that padding rows are never fully masked (SDPA would return NaN there).
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
  step.cache = cache;
  step.past = past;

  auto x = impl_->base->embed(ids);
  if (c.family == Family::gpt2) {
    x = x + impl_->base->wpe(pos);
  } else {
    torch::Tensor inv = impl_->inv_freq;
    if (c.rope_scaling.type == "dynamic" && S > c.max_positions) {
      inv = rotary_inv_freq(c, S).to(dev);
    } else {
      if (!impl_->inv_freq_dev.defined() || impl_->inv_freq_dev.device() != dev)
        impl_->inv_freq_dev = impl_->inv_freq.to(dev);
      inv = impl_->inv_freq_dev;
    }
    std::tie(step.cos, step.sin) = rotary_cos_sin(inv, pos, x.scalar_type(), c.family == Family::gptj);
  }

  const bool recompute = impl_->checkpointing && !cache && torch::GradMode::is_enabled();
  // Without gradients (scoring, the prompt's pass, the old log-probs), Llama blocks carry the
  // residual stream as decoding does (BlockImpl::forward_carried): each residual add fused with
  // the RMSNorm after it, one pass over the activations instead of two.
  step.carry = !recompute && can_carry(impl_->base, x);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Block block = impl_->base->blocks[static_cast<size_t>(i)];
    if (impl_->runner) {
      BlockFn fn = [block, step, i](const torch::Tensor& h) mutable { return block->forward(h, step, i); };
      x = impl_->runner(i, fn, x);
    } else if (recompute) {
      // The closure holds the block and this step's tables until backward has used them.
      auto fn = [block, step, i](const torch::Tensor& h) mutable { return block->forward(h, step, i); };
      x = checkpoint(fn, x, block->parameters());
    } else {
      x = block->forward(x, step, i);
    }
  }
  if (cache) cache->length = S;
  x = final_norm(impl_->base, x, step.carry, c.norm_eps);
  if (unshift.defined()) x = x.gather(1, unshift.expand({B, T, x.size(-1)}));  // the caller's positions
  return x;
}

bool TransformerImpl::decode_needs_host_length(int64_t max_len) const {
  return config_.family != Family::gpt2 && config_.rope_scaling.type == "dynamic" && max_len > config_.max_positions;
}

torch::Tensor TransformerImpl::decode_step(const torch::Tensor& ids, const torch::Tensor& positions,
                                           const torch::Tensor& slot, const torch::Tensor& key_valid, KVCache& cache,
                                           int64_t span, int64_t host_length) {
  const ModelConfig& c = config_;
  QUARTET_CHECK(head_ == Head::causal_lm, "decode_step needs the causal_lm head");
  QUARTET_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "decode_step: ids and positions must be [batch]");
  const int64_t B = ids.size(0);
  QUARTET_CHECK(static_cast<int64_t>(cache.k.size()) == c.num_layers && cache.k[0].size(0) >= B,
                "decode_step: the KV cache was made for another model or fewer rows");
  QUARTET_CHECK(span > 0 && span <= cache.max_len, "decode_step: span must be within the cache");
  QUARTET_CHECK(key_valid.dim() == 2 && key_valid.size(0) == B && key_valid.size(1) >= span &&
                    key_valid.scalar_type() == torch::kBool,
                "decode_step: key_valid must be a bool [batch, >= span] tensor");
  QUARTET_CHECK(slot.numel() == 1 && slot.scalar_type() == torch::kLong, "decode_step: slot must be one int64");
  const auto dev = ids.device();
  Step step;
  step.cache = &cache;
  step.slot = slot.view({1});
  step.span = span;
  {
    // The masks, needed only as the attention's additive biases.
    const auto mask = key_valid.narrow(1, 0, span).view({B, 1, 1, span});
    torch::Tensor sliding_mask;
    const auto& sl = c.sliding_layers;
    if (std::find(sl.begin(), sl.end(), true) != sl.end()) {
      auto k_slot = torch::arange(span, torch::TensorOptions().dtype(torch::kLong).device(dev));
      sliding_mask = mask & ((step.slot - k_slot) < c.sliding_window).view({1, 1, 1, span});
    }
    const int64_t g = c.num_heads / c.num_kv_heads;
    const auto dtype = c.family == Family::gptj ? torch::kFloat32 : impl_->base->embed->weight.scalar_type();
    auto to_bias = [&](const torch::Tensor& m) {
      return torch::zeros({B, 1, 1, span}, m.options().dtype(dtype))
          .masked_fill_(m.logical_not(), -std::numeric_limits<float>::infinity())
          .expand({B, c.num_kv_heads, g, span})
          .reshape({B * c.num_kv_heads, g, span});
    };
    step.bias = to_bias(mask);
    if (sliding_mask.defined()) step.sliding_bias = to_bias(sliding_mask);
  }
  auto pos = positions.view({B, 1});
  auto x = impl_->base->embed(ids.view({B, 1}));
  if (c.family == Family::gpt2) {
    x = x + impl_->base->wpe(pos);
  } else {
    torch::Tensor inv;
    if (decode_needs_host_length(host_length)) {
      inv = rotary_inv_freq(c, host_length).to(dev);
    } else {
      QUARTET_CHECK(!decode_needs_host_length(cache.max_len) || host_length >= 0,
                    "decode_step: dynamic rotary scaling beyond max_position_embeddings needs the host length");
      if (!impl_->inv_freq_dev.defined() || impl_->inv_freq_dev.device() != dev)
        impl_->inv_freq_dev = impl_->inv_freq.to(dev);
      inv = impl_->inv_freq_dev;
    }
    std::tie(step.cos, step.sin) = rotary_cos_sin(inv, pos, x.scalar_type(), c.family == Family::gptj);
    if (c.family == Family::llama && c.rotary_dim == c.head_dim) {
      const int64_t half = c.head_dim / 2;
      if (!impl_->swap_halves_dev.defined() || impl_->swap_halves_dev.device() != dev)
        impl_->swap_halves_dev = torch::cat({torch::arange(half, c.head_dim), torch::arange(half)}).to(dev);
      step.swap_halves = impl_->swap_halves_dev;
      step.sin_signed = torch::cat({-step.sin.narrow(-1, 0, half), step.sin.narrow(-1, half, half)}, -1);
    }
  }
  step.carry = can_carry(impl_->base, x);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Block block = impl_->base->blocks[static_cast<size_t>(i)];
    if (impl_->runner) {
      BlockFn fn = [block, step, i](const torch::Tensor& h) mutable { return block->forward(h, step, i); };
      x = impl_->runner(i, fn, x);
    } else {
      x = block->forward(x, step, i);
    }
  }
  x = final_norm(impl_->base, x, step.carry, c.norm_eps);
  return head_output(x, torch::Tensor()).view({B, -1});
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

torch::Tensor TransformerImpl::next_token_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                                 KVCache* cache) {
  QUARTET_CHECK(head_ == Head::causal_lm, "next_token_logits needs the causal_lm head");
  auto h = hidden_states(input_ids, attention_mask, cache);
  return head_output(h.narrow(1, h.size(1) - 1, 1), attention_mask).squeeze(1);
}

NamedTensors TransformerImpl::hf_state() const {
  NamedTensors out;
  for (const auto& item : named_parameters(true)) out.emplace_back(item.key(), item.value());
  return out;
}

void TransformerImpl::load_hf(const SafetensorsCheckpoint& checkpoint) { load_hf(checkpoint, true); }

std::vector<std::string> TransformerImpl::load_hf(const SafetensorsCheckpoint& ckpt, bool head_from_checkpoint) {
  std::vector<ParamShape> params;
  for (const auto& item : named_parameters(true)) params.push_back({item.key(), item.value().sizes().vec()});
  const WeightMap map = map_weights(ckpt, params, config_, head_,
                                    head_from_checkpoint ? HeadSource::checkpoint : HeadSource::fresh_if_missing);
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters(true)) {
    auto it = map.source.find(item.key());
    if (it != map.source.end()) item.value().copy_(ckpt.get(it->second));
  }
  return map.fresh;
}

Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype, torch::Device device) {
  return load_model(dir, head, dtype, device, true);
}

Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype, torch::Device device,
                       bool head_from_checkpoint) {
  auto config = ModelConfig::from_json_file(dir + "/config.json");
  SafetensorsCheckpoint ckpt(dir);
  Transformer model(config, head, torch::TensorOptions().dtype(dtype).device(device), /*random_init=*/false);
  const std::vector<std::string> fresh = model->load_hf(ckpt, head_from_checkpoint);
  if (!fresh.empty()) {
    // A head the checkpoint lacks gets HF's initialisation.
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_parameters(true)) {
      if (std::find(fresh.begin(), fresh.end(), item.key()) == fresh.end()) continue;
      if (item.key().size() > 5 && item.key().compare(item.key().size() - 5, 5, ".bias") == 0)
        item.value().zero_();
      else
        item.value().normal_(0.0, model->config().initializer_range);
    }
  }
  return model;
}

void save_model(const Transformer& model, const std::string& dir) {
  make_dirs(dir);
  auto state = model->hf_state();
  QUARTET_CHECK(!state.empty(), "save_model: the model has no parameters");
  std::string dtype;
  switch (state.front().second.scalar_type()) {
    case torch::kFloat32: dtype = "float32"; break;
    case torch::kBFloat16: dtype = "bfloat16"; break;
    case torch::kFloat16: dtype = "float16"; break;
    case torch::kFloat64: dtype = "float64"; break;
    default: dtype = c10::toString(state.front().second.scalar_type());
  }
  const std::string path = dir + "/config.json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    QUARTET_CHECK(out.good(), tmp + ": cannot write");
    out << model->config().to_json(architecture_name(model->config(), model->head()), dtype);
    out.close();
    QUARTET_CHECK(out.good(), tmp + ": write failed");
  }
  QUARTET_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
                path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  save_safetensors_checkpoint(dir, state);
}

}  // namespace quartet
