#pragma once
// quartet's own device kernels for the decoding step (src/model/decode_kernels.cu), where ATen
// would spend several small kernels on work that moves a few hundred kilobytes. Built when
// CMake finds a CUDA compiler; used on CUDA tensors unless switched off (QUARTET_DECODE_KERNELS=0
// in the environment, or set_decode_kernels(false)). Every kernel rounds exactly as the ATen
// operations it replaces, so the switch does not change results (tests compare bit for bit).
#include <torch/types.h>

namespace quartet {

// Compiled in, and not switched off.
bool decode_kernels_enabled();
void set_decode_kernels(bool on);

// One decoding step's fused q/k/v product qkv [B, (nh + 2 nkv) * hd] (heads: nh queries, nkv
// keys, nkv values; float32 or bfloat16, contiguous, on CUDA): queries and keys rotated as
// x cos + x[swap halves] sin_signed (cos, sin_signed [B, hd]; undefined for no rotation), the
// queries written to q_out [B, nh, hd], keys and values into rows 0..B-1 of k_cache and v_cache
// [rows, nkv, max_len, hd] at the slot held by `slot` (one int64 on the device). Replaces
// seven ATen kernels (rotary, query copy, two cache writes) by one.
void qkv_to_cache(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                  const torch::Tensor& slot, const torch::Tensor& q_out, const torch::Tensor& k_cache,
                  const torch::Tensor& v_cache, int64_t nh, int64_t nkv, int64_t hd);

}  // namespace quartet
