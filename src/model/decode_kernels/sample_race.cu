// One draw per row from softmax(logits / t) by the exponential race (model/decode_kernels.hpp
// sample_race). Plain CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// A draw from softmax(logits / t) per row of [B, V] (row stride `ld`), by the exponential race
// in log form: argmax_i logits_i / t - log E_i, with E [B, V] ~ Exp(1) given. The same token as
// argmax_i softmax_i / E_i (the ATen form), in one pass instead of five; ties go to the lowest id.
// min_key (optional, [B]): only tokens whose order_key is at least the row's take part (top-p's
// nucleus, top_p_keys).
template <typename T>
__global__ void sample_race_kernel(const T* __restrict__ logits, int64_t ld, const float* __restrict__ race, int V,
                                   float t, const uint32_t* __restrict__ min_key, int64_t* __restrict__ out) {
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  const int64_t row = blockIdx.x;
  float bv = -INFINITY;
  int bi = V;
  const uint32_t least = min_key ? min_key[row] : 0u;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float x = load(logits[row * ld + i]);
    if (order_key(x) < least) continue;
    const float v = x / t - logf(race[row * V + i]);
    if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) best_v[warp] = bv, best_i[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = lane < warps ? best_v[lane] : -INFINITY;
    bi = lane < warps ? best_i[lane] : V;
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    // Every candidate -inf (or NaN) cannot happen with finite logits; id 0 then, as argmax.
    if (lane == 0) out[row] = bi < V ? bi : 0;
  }
}

}  // namespace

cudaError_t launch_sample_race(bool bf16, const void* logits, int64_t ld, const float* race, int B, int V, float t,
                               const uint32_t* min_key, int64_t* out, cudaStream_t stream) {
  if (bf16)
    sample_race_kernel<__nv_bfloat16><<<B, 1024, 0, stream>>>(static_cast<const __nv_bfloat16*>(logits), ld, race, V,
                                                              t, min_key, out);
  else
    sample_race_kernel<float><<<B, 1024, 0, stream>>>(static_cast<const float*>(logits), ld, race, V, t, min_key, out);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
