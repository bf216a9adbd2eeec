// The step's fused q/k/v product into the queries and the KV cache (model/decode_kernels.hpp
// qkv_to_cache). Plain CUDA, no LibTorch headers: the C++ side checks the tensors and passes raw
// pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// One thread per element of the fused q/k/v product [B, nh + 2 nkv, hd]. Queries and keys
// rotate (rotate_half_split); queries go to q_out [B, nh, hd], keys and values into the cache
// at `slot`.
template <typename T>
__global__ void qkv_to_cache_kernel(const T* __restrict__ qkv, const T* __restrict__ cos,
                                    const T* __restrict__ sin_signed, const int64_t* __restrict__ slot,
                                    T* __restrict__ q_out, T* __restrict__ k_cache, T* __restrict__ v_cache, int B,
                                    int nh, int nkv, int hd, int64_t cache_row, int64_t cache_head, bool rotate) {
  const int heads = nh + 2 * nkv;
  const int64_t n = static_cast<int64_t>(B) * heads * hd;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int j = static_cast<int>(i % hd);
  const int h = static_cast<int>((i / hd) % heads);
  const int64_t b = i / (static_cast<int64_t>(hd) * heads);
  const int64_t at = *slot * hd + j;
  if (h >= nh + nkv) {
    v_cache[b * cache_row + (h - nh - nkv) * cache_head + at] = qkv[i];
    return;
  }
  const T y = rotate ? rotate_half_split(qkv + (i - j), cos + b * hd, sin_signed + b * hd, j, hd) : qkv[i];
  if (h < nh)
    q_out[(b * nh + h) * hd + j] = y;
  else
    k_cache[b * cache_row + (h - nh) * cache_head + at] = y;
}

}  // namespace

cudaError_t launch_qkv_to_cache(bool bf16, const void* qkv, const void* cos, const void* sin_signed,
                                const int64_t* slot, void* q_out, void* k_cache, void* v_cache, int B, int nh, int nkv,
                                int hd, int64_t cache_row, int64_t cache_head, bool rotate, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(B) * (nh + 2 * nkv) * hd;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  if (bf16) {
    using T = __nv_bfloat16;
    qkv_to_cache_kernel<T><<<blocks, threads, 0, stream>>>(
        static_cast<const T*>(qkv), static_cast<const T*>(cos), static_cast<const T*>(sin_signed), slot,
        static_cast<T*>(q_out), static_cast<T*>(k_cache), static_cast<T*>(v_cache), B, nh, nkv, hd, cache_row,
        cache_head, rotate);
  } else {
    qkv_to_cache_kernel<float><<<blocks, threads, 0, stream>>>(
        static_cast<const float*>(qkv), static_cast<const float*>(cos), static_cast<const float*>(sin_signed), slot,
        static_cast<float*>(q_out), static_cast<float*>(k_cache), static_cast<float*>(v_cache), B, nh, nkv, hd,
        cache_row, cache_head, rotate);
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
