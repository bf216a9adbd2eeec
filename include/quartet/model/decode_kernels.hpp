#pragma once
// quartet's own device kernels for the decoding step (src/model/decode_kernels/, one operation
// a file), where ATen would spend several small kernels on work that moves a few hundred
// kilobytes. Built when CMake finds a CUDA compiler; used on CUDA tensors unless switched off
// (the deck's kernels.decode = false, or set_decode_kernels(false)). Every kernel rounds exactly
// as the ATen operations it replaces, or computes in float32 what they round in between
// (attention, the RMSNorm's statistics): the switch changes results at most by rounding (tests
// check which).
#include <torch/types.h>

#include <utility>

namespace quartet {

// kernels.decode in force (core/kernel_switch.hpp).
bool decode_kernels_enabled();
void set_decode_kernels(bool on);

// Whether a decoding step's attention takes attend_decode below where it applies (bfloat16 heads
// of 128 with 1, 2, 4 or 8 query heads per KV head: about twice ATen's speed at the benchmark's
// spans, 3.1-3.3 TB/s on an H200), ATen's batched products elsewhere: kernels.decode_attention
// (default on; off: ATen's products always, for comparison).
bool decode_attention_enabled();
void set_decode_attention(bool on);
// Whether a decoding step's attention with g query heads per KV head of size hd in `dtype`
// takes attend_decode: decode kernels and decode attention on, the shape supported.
bool decode_attention_uses_kernel(torch::ScalarType dtype, int64_t g, int64_t hd);

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
// first two dimensions, unit stride over slots). Float32 inside, [B, nkv * g, hd] out in q's
// dtype. In registers (a half-warp per slot, no shared memory), for bfloat16 heads of 128 with
// g of 1, 2, 4 or 8 (attend_decode_supports) and 16-byte aligned tensors.
bool attend_decode_supports(torch::ScalarType dtype, int64_t g, int64_t hd);
// max_splits, for benchmarks and tests: the blocks that share one row and KV head's span (flash
// decoding; 0: chosen for the GPU). last_slot (optional, one int64 on the device, read when the
// kernel runs): the slots after it are masked for every row (a decoding step's slots not yet
// written), and are not read. A CUDA graph captured for a span then reads only what each step has.
torch::Tensor attend_decode(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                            const torch::Tensor& bias, int64_t span, double scale, int max_splits = 0,
                            const torch::Tensor& last_slot = torch::Tensor());

// qkv_to_cache then attend_decode in one kernel (attend_decode_qkv_supports, the shapes
// attend_decode_supports: bfloat16 heads of 128, g of 1, 2, 4 or 8): qkv, cos, sin_signed
// (defined: queries and keys rotate) and slot as qkv_to_cache takes them, the caches, bias and
// span as attend_decode does, the step's slot also its last_slot. Each block rotates its own
// queries, and the block whose split holds the slot first writes the step's key and value into
// the cache: the same bits as the two calls (out [B, nh, hd], and the caches), one launch fewer
// a layer. max_splits as attend_decode's. Used by a Llama decoding step where the attention
// takes attend_decode, unless the deck sets kernels.decode_fused_qkv = false (or
// set_decode_qkv_fused(false)).
bool decode_qkv_fused_enabled();
void set_decode_qkv_fused(bool on);
bool attend_decode_qkv_supports(torch::ScalarType dtype, int64_t g, int64_t hd);
torch::Tensor attend_decode_qkv(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                                const torch::Tensor& slot, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                                const torch::Tensor& bias, int64_t span, double scale, int64_t nh, int64_t nkv,
                                int max_splits = 0);

// attend_decode_qkv over a paged cache (model/paged_cache.hpp), for decode_step_paged: the pools
// k_pool, v_pool [blocks, block_size, nkv, hd] in the place of the caches, row r's slots through
// table [B, max_blocks] (int32), the step's key and value written at slot context[r] - 1 and the
// slots below context[r] attended (int64 [B]; 0: an idle row, nothing read or written, zeros
// out), the last `window` of them where window > 0. No mask. span bounds every row's context
// (it sets the splits). The shapes of attend_decode_qkv_supports; max_splits as attend_decode's.
bool attend_paged_supports(torch::ScalarType dtype, int64_t g, int64_t hd);
torch::Tensor attend_paged_qkv(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                               const torch::Tensor& k_pool, const torch::Tensor& v_pool, const torch::Tensor& table,
                               const torch::Tensor& context, int64_t span, double scale, int64_t nh, int64_t nkv,
                               int64_t window, int max_splits = 0);

// One draw per row from softmax(logits / temperature), logits [B, V] (float32 or bfloat16, unit
// stride along V) and race [B, V] float32 ~ Exp(1): argmax_i logits_i / temperature - log race_i,
// the token that the exponential race argmax_i softmax_i / race_i picks, in one kernel. int64 [B].
// min_key (int32 [B], from top_p_keys): only the row's nucleus takes part, the token that the race
// over the top-p-warped distribution picks.
torch::Tensor sample_race(const torch::Tensor& logits, const torch::Tensor& race, double temperature,
                          const torch::Tensor& min_key = torch::Tensor());

// Top-p's nucleus of each row of logits [B, V] (as sample_race takes them) under
// softmax(logits / temperature), without sorting: the fewest most likely tokens whose probability
// reaches top_p (in (0, 1)), HF's TopPLogitsWarper's set, except that tokens tied with the
// nucleus's least likely one are all kept. Returned as that token's order key (int32 [B], the
// bits of an unsigned key): a token is in the nucleus when its key is at least the row's. The
// probabilities are summed in fixed point, so the nucleus does not depend on the threads' order.
torch::Tensor top_p_keys(const torch::Tensor& logits, double temperature, double top_p);

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
