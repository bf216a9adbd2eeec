// SiLU(gate) x up of a decoding step's fused gate/up product (model/decode_kernels.hpp
// silu_mul): the bits of torch::silu then mul. Plain CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// SiLU(g) × u, each of the two ATen operations' results rounded to T, as torch.silu then mul
// do (the same bits).
template <typename T>
__device__ __forceinline__ T silu_times(float g, float u) {
  const float s = rounded<T>(g / (1.0f + expf(-g)));
  return store<T>(__fmul_rn(s, u));
}
// SiLU(gate) × up over the fused gate/up product [R, 2I] into [R, I], an element a thread.
template <typename T>
__global__ void silu_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t R, int64_t I) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * I) return;
  const int64_t r = i / I, c = i % I;
  out[i] = silu_times<T>(load(gate_up[r * 2 * I + c]), load(gate_up[r * 2 * I + I + c]));
}
// The same, VEC elements (16 bytes) a thread, for I a multiple of VEC and 16-byte aligned rows:
// a decoding step's 64 rows of 5632 in 176 blocks instead of 1408 (the kernel is all latency).
template <typename T, int VEC>
__global__ void silu_mul_vec_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t R, int64_t I) {
  static_assert(VEC * sizeof(T) == 16, "one 16-byte access per vector");
  union Pack {
    uint4 raw;
    T e[VEC];
  };
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (i >= R * I) return;
  const int64_t r = i / I, c = i % I;
  Pack g, u, o;
  g.raw = *reinterpret_cast<const uint4*>(gate_up + r * 2 * I + c);
  u.raw = *reinterpret_cast<const uint4*>(gate_up + r * 2 * I + I + c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) o.e[j] = silu_times<T>(load(g.e[j]), load(u.e[j]));
  *reinterpret_cast<uint4*>(out + i) = o.raw;
}

}  // namespace

cudaError_t launch_silu_mul(bool bf16, const void* gate_up, void* out, int64_t R, int64_t I, cudaStream_t stream) {
  const int threads = 256;
  if (aligned16(gate_up) && aligned16(out) && I % (bf16 ? 8 : 4) == 0) {
    // 16 bytes of gate, of up and of the output a thread.
    const int64_t vecs = R * I / (bf16 ? 8 : 4);
    const unsigned blocks = static_cast<unsigned>((vecs + threads - 1) / threads);
    if (bf16)
      silu_mul_vec_kernel<__nv_bfloat16, 8><<<blocks, threads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_bfloat16*>(out), R, I);
    else
      silu_mul_vec_kernel<float, 4><<<blocks, threads, 0, stream>>>(static_cast<const float*>(gate_up),
                                                                    static_cast<float*>(out), R, I);
    return cudaGetLastError();
  }
  const unsigned blocks = static_cast<unsigned>((R * I + threads - 1) / threads);
  if (bf16) {
    using T = __nv_bfloat16;
    silu_mul_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<const T*>(gate_up), static_cast<T*>(out), R, I);
  } else {
    silu_mul_kernel<float><<<blocks, threads, 0, stream>>>(static_cast<const float*>(gate_up), static_cast<float*>(out),
                                                           R, I);
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
