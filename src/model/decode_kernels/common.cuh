// What the decoding step's kernels (this folder, one operation a file) share beyond
// core/kernel_common.cuh: the rotation of a head in halves, rounded as ATen rounds it
// (qkv_to_cache and the fused attention), and warp-wide sums and maxima.
#pragma once

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {

// Element j of a query or key head (head: its hd elements in the fused q/k/v product) rotated as
// x cos + x[swap halves] sin_signed (cos_row, sin_row: the row's [hd]), each product and the sum
// rounded to T as the three ATen operations do (the _rn intrinsics keep the compiler from fusing
// them into an FMA).
template <typename T>
__device__ __forceinline__ T rotate_half_split(const T* head, const T* cos_row, const T* sin_row, int j, int hd) {
  const int half = hd / 2;
  const int swapped = j < half ? j + half : j - half;
  const float a = rounded<T>(__fmul_rn(load(head[j]), load(cos_row[j])));
  const float c = rounded<T>(__fmul_rn(load(head[swapped]), load(sin_row[j])));
  return store<T>(__fadd_rn(a, c));
}

// A float's place in the order of floats as an unsigned key (larger float, larger key; -inf
// lowest but NaN): top_p_keys' radix select and sample_race's nucleus test share it.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace kernels
}  // namespace quartet
