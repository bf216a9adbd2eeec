// What quartet's device kernels share (src/model/*.cu, src/shard/*.cu): float32 arithmetic on
// float32 or bfloat16 elements rounded as ATen rounds, 16-byte vector access, and the grid of
// a memory-bound grid-stride loop. Plain CUDA, no LibTorch headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace quartet {
namespace kernels {

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

// VEC consecutive elements at p as floats: one 16-byte (or 8-byte) access where they make 16
// (or 8) bytes (p then aligned to that), else one by one.
template <int VEC, typename T>
__device__ __forceinline__ void load_vec(const T* p, float* out) {
  if constexpr (VEC * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int v = 0; v < VEC; ++v) out[v] = load(e[v]);
  } else if constexpr (VEC * sizeof(T) == 8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int v = 0; v < VEC; ++v) out[v] = load(e[v]);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) out[v] = load(p[v]);
  }
}
// The reverse: VEC floats rounded to T and stored at p, in one 16-byte access where they fit.
template <int VEC, typename T>
__device__ __forceinline__ void store_vec(T* p, const float* in) {
  if constexpr (VEC * sizeof(T) == 16) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int v = 0; v < VEC; ++v) e[v] = store<T>(in[v]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) p[v] = store<T>(in[v]);
  }
}

// Whether a pointer allows the 16-byte vector access above.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The current device's multiprocessors (132 on an H200), asked once.
inline int multiprocessors() {
  static const int n = [] {
    int device = 0, count = 132;
    if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count;
  }();
  return n;
}

// Blocks for a grid-stride loop over `items` of `threads` each: enough to keep every SM's
// memory requests in flight (8 blocks per SM), each thread looping over the rest.
inline int grid_stride_blocks(int64_t items, int threads) {
  const int64_t want = (items + threads - 1) / threads;
  const int64_t most = 8LL * multiprocessors();
  return static_cast<int>(want < most ? want : most);
}

}  // namespace kernels
}  // namespace quartet
