#pragma once
// quartet's own device kernels for the decoding step (src/model/decode_kernels.cu), where ATen
// would spend several small kernels on work that moves a few hundred kilobytes. Built when
// CMake finds a CUDA compiler; used on CUDA tensors unless switched off (QUARTET_DECODE_KERNELS=0
// in the environment, or set_decode_kernels(false)). Every kernel rounds exactly as the ATen
// operations it replaces, or computes in float32 what they round in between (attention, the
// RMSNorm's statistics): the switch changes results at most by rounding (tests check which).
#include <torch/types.h>

#include <utility>

namespace quartet {

// Compiled in, and not switched off.
bool decode_kernels_enabled();
void set_decode_kernels(bool on);

// The attention kernel below in decoding steps: off unless QUARTET_DECODE_ATTENTION=kernel (or
// set_decode_attention_kernel(true)). On the H200 it reads the cache at 1.6-1.8 TB/s, slower
// than ATen's two batched products at the benchmark's spans (bench/RESULTS.md), so ATen's stay
// the default until it is faster.
bool decode_attention_kernel_enabled();
void set_decode_attention_kernel(bool on);

// One decoding step's fused q/k/v product qkv [B, (nh + 2 nkv) * hd] (heads: nh queries, nkv
// keys, nkv values; float32 or bfloat16, contiguous, on CUDA): queries and keys rotated as
// x cos + x[swap halves] sin_signed (cos, sin_signed [B, hd]; undefined for no rotation), the
// queries written to q_out [B, nh, hd], keys and values into rows 0..B-1 of k_cache and v_cache
// [rows, nkv, max_len, hd] at the slot held by `slot` (one int64 on the device). Replaces
// seven ATen kernels (rotary, query copy, two cache writes) by one.
void qkv_to_cache(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                  const torch::Tensor& slot, const torch::Tensor& q_out, const torch::Tensor& k_cache,
                  const torch::Tensor& v_cache, int64_t nh, int64_t nkv, int64_t hd);

// Residual add and RMSNorm of a decoding step: x, a [R, H] and weight [H] (float32 or bfloat16,
// contiguous, on CUDA) to {x + a (ATen's bits), RMSNorm(x + a) * weight with float32 statistics}.
// sum_out, where defined (contiguous, like x), receives x + a and is returned as the first.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& a,
                                                     const torch::Tensor& weight, double eps,
                                                     const torch::Tensor& sum_out = {});

// SiLU(gate) * up from the fused gate/up product [R, 2I] (gate first): [R, I], the same bits as
// torch::silu then mul.
torch::Tensor silu_mul(const torch::Tensor& gate_up);

// One decoding step's attention: queries q [B, nkv * g, hd] (the g query heads of each KV head
// adjacent) over the first `span` slots of k_cache, v_cache [rows >= B, nkv, max_len, hd], with
// the additive mask bias [B * nkv, g, span] (the model's dtype, or float32; any strides over its
// first two dimensions, unit stride over slots). Float32 inside,
// [B, nkv * g, hd] out in q's dtype. Needs g <= 8 and hd <= 256.
bool attend_decode_supports(int64_t g, int64_t hd);
// For benchmarks: max_splits sets the blocks that share one row and KV head's span (flash
// decoding; 0: chosen for the GPU), chunk_bytes the keys per chunk in shared memory (0: 8 KB);
// blocks_per_sm non-null launches nothing and reports how many blocks one SM holds at once.
torch::Tensor attend_decode(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                            const torch::Tensor& bias, int64_t span, double scale, int max_splits = 0,
                            int chunk_bytes = 0, int* blocks_per_sm = nullptr);

// One draw per row from softmax(logits / temperature), logits [B, V] (float32 or bfloat16, unit
// stride along V) and race [B, V] float32 ~ Exp(1): argmax_i logits_i / temperature - log race_i,
// the token that the exponential race argmax_i softmax_i / race_i picks, in one kernel. int64 [B].
torch::Tensor sample_race(const torch::Tensor& logits, const torch::Tensor& race, double temperature);

// A decoding step's bookkeeping after its picks next [rows] (int64, CUDA), in one kernel: for
// each row r, t = done[r] ? pad_id : next[r]; hist[r, *step] = t, hist_mask[r, *step] = !done[r],
// lengths[r] += !done[r], done[r] |= t in stop_ids (undefined: none), tok[r] = t; then *step += 1,
// and *slot += 1 and pos[r] += 1 where they are defined. All int64 except done (bool), all
// contiguous; hist and hist_mask [>= rows, N]. Replaces about a dozen ATen kernels.
void advance_decode(const torch::Tensor& next, const torch::Tensor& done, const torch::Tensor& hist,
                    const torch::Tensor& hist_mask, const torch::Tensor& lengths, const torch::Tensor& tok,
                    const torch::Tensor& stop_ids, const torch::Tensor& step, const torch::Tensor& pos,
                    const torch::Tensor& slot, int64_t pad_id);

// softmax(scores + bias) over the last dimension in float32, rounded once to the scores' dtype
// (float32 or bfloat16; bias alike, contiguous, 0 or -inf): with scores from baddbmm at beta 0,
// the bits of ATen's baddbmm(bias, ...) then softmax up to the order of the sum, without
// baddbmm's copy of the bias into its output.
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& bias);

}  // namespace quartet
