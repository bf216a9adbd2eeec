// SiLU(gate) * up, forward and backward (model/swiglu_kernel.hpp). Plain CUDA, no LibTorch
// headers: the C++ side checks the tensors and passes raw pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {
namespace {

// torch::silu's value, rounded to T (what autograd saves for mul's backward).
template <typename T>
__device__ __forceinline__ float silu_rounded(float g) {
  return rounded<T>(g / (1.0f + expf(-g)));
}

// Forward: out = SiLU(gate) * up, each of the two results rounded to T.
// Backward: d_up = grad * SiLU(gate) and d_s = grad * up (mul's gradients, rounded), then
// d_gate = d_s * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))), silu_backward's formula.
// Rows of `width` elements: gate and up step by in_stride a row (width when they are tensors of
// their own, 2 width when packed as one [.., 2 width] product), grad by width, out and d_gate
// by out_stride; VEC divides width.
template <typename T, bool kBackward, int VEC>
__global__ void swiglu_kernel(const T* __restrict__ gate, const T* __restrict__ up, const T* __restrict__ grad,
                              T* __restrict__ out, T* __restrict__ d_gate, int64_t groups, int64_t width,
                              int64_t in_stride, int64_t out_stride) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * VEC, row = e / width, col = e - row * width;
    const int64_t at_in = row * in_stride + col, at_out = row * out_stride + col;
    float g[VEC], u[VEC], r[VEC];
    load_vec<VEC>(gate + at_in, g);
    load_vec<VEC>(up + at_in, u);
    if constexpr (!kBackward) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) r[k] = __fmul_rn(silu_rounded<T>(g[k]), u[k]);
      store_vec<VEC>(out + at_out, r);
    } else {
      float dy[VEC], dg[VEC];
      load_vec<VEC>(grad + e, dy);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        r[k] = __fmul_rn(dy[k], silu_rounded<T>(g[k]));  // d_up
        const float ds = rounded<T>(__fmul_rn(dy[k], u[k]));
        const float sig = 1.0f / (1.0f + expf(-g[k]));
        dg[k] = ds * sig * (1.0f + g[k] * (1.0f - sig));
      }
      store_vec<VEC>(out + at_out, r);
      store_vec<VEC>(d_gate + at_out, dg);
    }
  }
}

template <typename T, bool kBackward>
cudaError_t launch(const void* gate, const void* up, const void* grad, void* out, void* d_gate, int64_t n,
                   int64_t width, int64_t in_stride, int64_t out_stride, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int threads = 256;
  auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = width % kVec == 0 && in_stride % kVec == 0 && out_stride % kVec == 0 && aligned(gate) &&
                   aligned(up) && aligned(grad) && aligned(out) && aligned(d_gate);
  const int64_t groups = vec ? n / kVec : n;
  if (groups == 0) return cudaSuccess;
  const T* g = static_cast<const T*>(gate);
  const T* u = static_cast<const T*>(up);
  const T* dy = static_cast<const T*>(grad);
  T* o = static_cast<T*>(out);
  T* dg = static_cast<T*>(d_gate);
  const int blocks = grid_stride_blocks(groups, threads);
  if (vec)
    swiglu_kernel<T, kBackward, kVec><<<blocks, threads, 0, stream>>>(g, u, dy, o, dg, groups, width, in_stride,
                                                                       out_stride);
  else
    swiglu_kernel<T, kBackward, 1><<<blocks, threads, 0, stream>>>(g, u, dy, o, dg, groups, width, in_stride,
                                                                    out_stride);
  return cudaGetLastError();
}

}  // namespace

// Forward (grad and d_gate null): out = SiLU(gate) * up. Backward: out = d_up, d_gate. n elements
// in rows of `width` (see swiglu_kernel for the strides).
cudaError_t launch_swiglu(bool bf16, const void* gate, const void* up, const void* grad, void* out, void* d_gate,
                          int64_t n, int64_t width, int64_t in_stride, int64_t out_stride, cudaStream_t stream) {
  const bool backward = grad != nullptr;
  if (bf16)
    return backward ? launch<__nv_bfloat16, true>(gate, up, grad, out, d_gate, n, width, in_stride, out_stride, stream)
                    : launch<__nv_bfloat16, false>(gate, up, grad, out, d_gate, n, width, in_stride, out_stride, stream);
  return backward ? launch<float, true>(gate, up, grad, out, d_gate, n, width, in_stride, out_stride, stream)
                  : launch<float, false>(gate, up, grad, out, d_gate, n, width, in_stride, out_stride, stream);
}

}  // namespace kernels
}  // namespace quartet
