// The backward of a residual add followed by an RMSNorm (model/norm_kernel.hpp). Plain CUDA,
// no LibTorch headers: the C++ side checks the tensors and passes raw pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {
namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Both of a block's partial sums at once (one barrier pair instead of two).
__device__ __forceinline__ float2 block_sum2(float a, float b) {
  __shared__ float2 partial[32];
  a = warp_sum(a);
  b = warp_sum(b);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // the previous row's readers of partial[0] are done
  if (lane == 0) partial[warp] = make_float2(a, b);
  __syncthreads();
  if (warp == 0) {
    float2 p = lane < warps ? partial[lane] : make_float2(0.f, 0.f);
    p.x = warp_sum(p.x);
    p.y = warp_sum(p.y);
    if (lane == 0) partial[0] = p;
  }
  __syncthreads();
  return partial[0];
}

// s = x + a [R, H] was normed to n = w * (s * rstd), rstd = 1 / sqrt(mean(s^2) + eps), and s also
// went on with gradient gs (or none). Given gn (n's gradient), per row in float32:
//   ds = gs + rstd * (gn * w) - s * rstd^3 * mean(gn * w * s)
// rounded once to T (x's and a's gradient both), and each block's share of the weight's
// gradient sum over its rows of gn * s * rstd into dw_partial [gridDim.x, H]. rstd is
// recomputed from s, as the forward kernel computed it. A thread holds VEC columns (16 bytes)
// of every row it visits, so its share of dw stays in registers; blocks stride over the rows.
template <typename T, int VEC>
__global__ void add_rms_norm_backward_kernel(const T* __restrict__ s, const T* __restrict__ gn,
                                             const T* __restrict__ gs, const T* __restrict__ w, T* __restrict__ ds,
                                             float* __restrict__ dw_partial, int64_t R, int H, float eps) {
  static_assert(VEC * sizeof(T) == 16, "one 16-byte access per vector");
  union Pack {
    uint4 raw;
    T e[VEC];
  };
  const int c0 = threadIdx.x * VEC;  // blockDim.x * VEC == H
  float wv[VEC], dw[VEC];
  {
    Pack p;
    p.raw = *reinterpret_cast<const uint4*>(w + c0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) wv[j] = load(p.e[j]), dw[j] = 0.f;
  }
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    const int64_t at = row * H + c0;
    Pack ps, pg, po;
    ps.raw = *reinterpret_cast<const uint4*>(s + at);
    pg.raw = *reinterpret_cast<const uint4*>(gn + at);
    float sv[VEC], gw[VEC], ss = 0.f, dot = 0.f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sv[j] = load(ps.e[j]);
      gw[j] = load(pg.e[j]) * wv[j];
      ss = fmaf(sv[j], sv[j], ss);
      dot = fmaf(gw[j], sv[j], dot);
    }
    const float2 sums = block_sum2(ss, dot);
    const float rstd = rsqrtf(sums.x / static_cast<float>(H) + eps);
    const float c = rstd * rstd * rstd * sums.y / static_cast<float>(H);
    float up[VEC];
    if (gs) {
      Pack pu;
      pu.raw = *reinterpret_cast<const uint4*>(gs + at);
#pragma unroll
      for (int j = 0; j < VEC; ++j) up[j] = load(pu.e[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) up[j] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      po.e[j] = store<T>(up[j] + fmaf(rstd, gw[j], -c * sv[j]));
      dw[j] = fmaf(load(pg.e[j]), sv[j] * rstd, dw[j]);
    }
    *reinterpret_cast<uint4*>(ds + at) = po.raw;
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_partial[static_cast<int64_t>(blockIdx.x) * H + c0 + j] = dw[j];
}

}  // namespace

// Threads a row (H / VEC), or 0 where the kernel does not take this width.
int add_rms_norm_backward_threads(bool bf16, int H) {
  const int vec = bf16 ? 8 : 4;
  if (H % vec != 0 || H / vec > 1024 || (H / vec) % 32 != 0) return 0;
  return H / vec;
}

cudaError_t launch_add_rms_norm_backward(bool bf16, const void* s, const void* gn, const void* gs, const void* w,
                                         void* ds, float* dw_partial, int64_t R, int H, int blocks, float eps,
                                         cudaStream_t stream) {
  const int threads = add_rms_norm_backward_threads(bf16, H);
  if (threads == 0 || blocks <= 0) return cudaErrorInvalidValue;
  if (bf16) {
    using T = __nv_bfloat16;
    add_rms_norm_backward_kernel<T, 8><<<blocks, threads, 0, stream>>>(
        static_cast<const T*>(s), static_cast<const T*>(gn), static_cast<const T*>(gs), static_cast<const T*>(w),
        static_cast<T*>(ds), dw_partial, R, H, eps);
  } else {
    add_rms_norm_backward_kernel<float, 4><<<blocks, threads, 0, stream>>>(
        static_cast<const float*>(s), static_cast<const float*>(gn), static_cast<const float*>(gs),
        static_cast<const float*>(w), static_cast<float*>(ds), dw_partial, R, H, eps);
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
