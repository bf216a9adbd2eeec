// Device kernels of the decoding step (model/decode_kernels.hpp). Plain CUDA, no LibTorch
// headers: the C++ side checks the tensors and passes raw pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace quartet {
namespace kernels {
namespace {

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// One ATen elementwise operation's result: computed in float, rounded once to T.
template <typename T>
__device__ __forceinline__ float rounded(float v) { return load(store<T>(v)); }

// One thread per element of the fused q/k/v product [B, nh + 2 nkv, hd]. Queries and keys
// rotate as x cos + x[swap] sin_signed, each product and the sum rounded to T as the three
// ATen operations do (the _rn intrinsics keep the compiler from fusing them into an FMA);
// queries go to q_out [B, nh, hd], keys and values into the cache at `slot`.
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
  T y = qkv[i];
  if (rotate) {
    const int half = hd / 2;
    const int swapped = j < half ? j + half : j - half;
    const float a = rounded<T>(__fmul_rn(load(qkv[i]), load(cos[b * hd + j])));
    const float c = rounded<T>(__fmul_rn(load(qkv[i - j + swapped]), load(sin_signed[b * hd + j])));
    y = store<T>(__fadd_rn(a, c));
  }
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
