// The residual add and RMSNorm of a decoding step (model/decode_kernels.hpp add_rms_norm): with
// each thread's elements in registers where a row allows, else in two passes. Plain CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// rsqrt(mean of squares + eps) of a row of H whose squares each thread summed into ss; every
// thread of the block gets it (all threads must call).
__device__ __forceinline__ float block_rstd(float ss, int H, float eps) {
  __shared__ float partial[32];
  ss = warp_sum(ss);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    ss = lane < warps ? partial[lane] : 0.f;
    ss = warp_sum(ss);
    if (lane == 0) partial[0] = rsqrtf(ss / static_cast<float>(H) + eps);
  }
  __syncthreads();
  return partial[0];
}

// Residual add and RMSNorm of one decoding step, one block per row of [R, H]: sum = x + a
// (rounded to T, as ATen's add), normed = w * T(sum * rsqrt(mean(sum²) + eps)) with float32
// statistics and HF LlamaRMSNorm's rounding (to T before the weight). The sum of squares is
// reduced in another order than at::rms_norm's, so normed agrees to rounding, not bit for bit.
template <typename T>
__global__ void add_rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ a, const T* __restrict__ w,
                                    T* __restrict__ sum, T* __restrict__ normed, int H, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const T s = store<T>(__fadd_rn(load(x[row + i]), load(a[row + i])));
    sum[row + i] = s;
    const float f = load(s);
    ss += f * f;
  }
  const float rstd = block_rstd(ss, H, eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float n = rounded<T>(__fmul_rn(load(sum[row + i]), rstd));
    normed[row + i] = store<T>(__fmul_rn(load(w[i]), n));
  }
}

// The same sums and roundings as add_rms_norm_kernel with each thread's elements held in
// registers, read and written 16 bytes at a time: one pass over memory instead of a second
// read of the sum, for rows of H = VEC * n elements, n <= MAXV * blockDim.x (16-byte aligned).
template <typename T, int VEC, int MAXV>
__global__ void add_rms_norm_vec_kernel(const T* __restrict__ x, const T* __restrict__ a, const T* __restrict__ w,
                                        T* __restrict__ sum, T* __restrict__ normed, int H, float eps) {
  static_assert(VEC * sizeof(T) == 16, "one 16-byte load per vector");
  union Pack {
    uint4 raw;
    T e[VEC];
  };
  const int64_t row = static_cast<int64_t>(blockIdx.x) * H;
  const int nvec = H / VEC;
  float s[MAXV][VEC];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < MAXV; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    if (v < nvec) {
      Pack px, pa, ps;
      px.raw = *reinterpret_cast<const uint4*>(x + row + static_cast<int64_t>(v) * VEC);
      pa.raw = *reinterpret_cast<const uint4*>(a + row + static_cast<int64_t>(v) * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ps.e[j] = store<T>(__fadd_rn(load(px.e[j]), load(pa.e[j])));
        s[k][j] = load(ps.e[j]);
        ss += s[k][j] * s[k][j];
      }
      *reinterpret_cast<uint4*>(sum + row + static_cast<int64_t>(v) * VEC) = ps.raw;
    }
  }
  const float rstd = block_rstd(ss, H, eps);
#pragma unroll
  for (int k = 0; k < MAXV; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    if (v < nvec) {
      Pack pw, po;
      pw.raw = *reinterpret_cast<const uint4*>(w + static_cast<int64_t>(v) * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float n = rounded<T>(__fmul_rn(s[k][j], rstd));
        po.e[j] = store<T>(__fmul_rn(load(pw.e[j]), n));
      }
      *reinterpret_cast<uint4*>(normed + row + static_cast<int64_t>(v) * VEC) = po.raw;
    }
  }
}

}  // namespace

cudaError_t launch_add_rms_norm(bool bf16, const void* x, const void* a, const void* w, void* sum, void* normed, int R,
                                int H, float eps, cudaStream_t stream) {
  constexpr int kMaxVecs = 4;
  const int vec = bf16 ? 8 : 4, nvec = H / vec;
  if (H % vec == 0 && nvec <= 1024 * kMaxVecs && aligned16(x) && aligned16(a) && aligned16(w) && aligned16(sum) &&
      aligned16(normed)) {
    // One 16-byte vector per thread where a block holds them all (up to 1024 threads), else
    // up to kMaxVecs each.
    const int threads = std::min(1024, (nvec + 31) / 32 * 32);
    if (bf16) {
      using T = __nv_bfloat16;
      add_rms_norm_vec_kernel<T, 8, kMaxVecs><<<R, threads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(a), static_cast<const T*>(w), static_cast<T*>(sum),
          static_cast<T*>(normed), H, eps);
    } else {
      add_rms_norm_vec_kernel<float, 4, kMaxVecs><<<R, threads, 0, stream>>>(
          static_cast<const float*>(x), static_cast<const float*>(a), static_cast<const float*>(w),
          static_cast<float*>(sum), static_cast<float*>(normed), H, eps);
    }
    return cudaGetLastError();
  }
  const int threads = H >= 1024 ? 512 : 128;
  if (bf16) {
    using T = __nv_bfloat16;
    add_rms_norm_kernel<T><<<R, threads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(a),
                                                      static_cast<const T*>(w), static_cast<T*>(sum),
                                                      static_cast<T*>(normed), H, eps);
  } else {
    add_rms_norm_kernel<float><<<R, threads, 0, stream>>>(static_cast<const float*>(x), static_cast<const float*>(a),
                                                          static_cast<const float*>(w), static_cast<float*>(sum),
                                                          static_cast<float*>(normed), H, eps);
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
