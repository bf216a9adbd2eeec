// Rotary embeddings in halves (Llama, NeoX) in one kernel, forward and backward
// (model/rotary.hpp). Plain CUDA, no LibTorch headers: the C++ side checks the tensors and passes
// raw pointers and strides.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {
namespace {

struct Strides4 {
  int64_t s[4];
};

// One thread per VEC pairs (j, j + h) of a head's D = 2h dims at one (b, head, t):
//   forward   out_j = x_j cos_j - x_{j+h} sin_j,     out_{j+h} = x_{j+h} cos_{j+h} + x_j sin_{j+h}
//   backward  gx_j  = g_j cos_j + g_{j+h} sin_{j+h}, gx_{j+h}  = g_{j+h} cos_{j+h} - g_j sin_j
// each product and the sum rounded to T as ATen's mul, mul, add (and the exact negation) do, so
// the bits are those of x * cos + rotate_half(x) * sin and of its autograd backward. VEC > 1
// needs unit strides along D and 16-byte aligned rows (the launcher checks).
template <typename T, bool kBackward, int VEC>
__global__ void rotary_kernel(const T* __restrict__ x, Strides4 xs, const T* __restrict__ cos,
                              const T* __restrict__ sin, Strides4 cs, T* __restrict__ out, Strides4 os, int64_t H,
                              int64_t S, int64_t h, int64_t groups) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups) return;
  const int64_t per_row = h / VEC;
  const int64_t j = (i % per_row) * VEC;
  int64_t r = i / per_row;
  const int64_t t = r % S;
  r /= S;
  const int64_t head = r % H, b = r / H;
  const T* xr = x + b * xs.s[0] + head * xs.s[1] + t * xs.s[2];
  const T* cr = cos + b * cs.s[0] + t * cs.s[2];
  const T* sr = sin + b * cs.s[0] + t * cs.s[2];
  T* orow = out + b * os.s[0] + head * os.s[1] + t * os.s[2];
  float x1[VEC], x2[VEC], c1[VEC], c2[VEC], s1[VEC], s2[VEC], o1[VEC], o2[VEC];
  load_vec<VEC>(xr + j * xs.s[3], x1);
  load_vec<VEC>(xr + (j + h) * xs.s[3], x2);
  load_vec<VEC>(cr + j * cs.s[3], c1);
  load_vec<VEC>(cr + (j + h) * cs.s[3], c2);
  load_vec<VEC>(sr + j * cs.s[3], s1);
  load_vec<VEC>(sr + (j + h) * cs.s[3], s2);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    if constexpr (!kBackward) {
      o1[k] = __fadd_rn(rounded<T>(__fmul_rn(x1[k], c1[k])), -rounded<T>(__fmul_rn(x2[k], s1[k])));
      o2[k] = __fadd_rn(rounded<T>(__fmul_rn(x2[k], c2[k])), rounded<T>(__fmul_rn(x1[k], s2[k])));
    } else {
      o1[k] = __fadd_rn(rounded<T>(__fmul_rn(x1[k], c1[k])), rounded<T>(__fmul_rn(x2[k], s2[k])));
      o2[k] = __fadd_rn(rounded<T>(__fmul_rn(x2[k], c2[k])), -rounded<T>(__fmul_rn(x1[k], s1[k])));
    }
  }
  store_vec<VEC>(orow + j * os.s[3], o1);
  store_vec<VEC>(orow + (j + h) * os.s[3], o2);
}

template <typename T, bool kBackward>
cudaError_t launch(const void* x, const Strides4& xs, const void* cos, const void* sin, const Strides4& cs, void* out,
                   const Strides4& os, int64_t B, int64_t H, int64_t S, int64_t h, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  // Vectors where every row starts on a 16-byte boundary and D is walked with unit stride.
  auto rows_aligned = [](const void* p, const Strides4& st) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || st.s[3] != 1) return false;
    for (int k = 0; k < 3; ++k)
      if (st.s[k] % kVec != 0) return false;
    return true;
  };
  const bool vec = h % kVec == 0 && rows_aligned(x, xs) && rows_aligned(cos, cs) && rows_aligned(sin, cs) &&
                   rows_aligned(out, os);
  const int64_t groups = B * H * S * (vec ? h / kVec : h);
  if (groups == 0) return cudaSuccess;
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned>((groups + threads - 1) / threads);
  const T* xt = static_cast<const T*>(x);
  const T* ct = static_cast<const T*>(cos);
  const T* st = static_cast<const T*>(sin);
  T* ot = static_cast<T*>(out);
  if (vec)
    rotary_kernel<T, kBackward, kVec><<<blocks, threads, 0, stream>>>(xt, xs, ct, st, cs, ot, os, H, S, h, groups);
  else
    rotary_kernel<T, kBackward, 1><<<blocks, threads, 0, stream>>>(xt, xs, ct, st, cs, ot, os, H, S, h, groups);
  return cudaGetLastError();
}

}  // namespace

// x, out [B, H, S, 2h] and cos, sin [B or 1, 1, S, 2h] (strides in elements; cos and sin share
// theirs, 0 where broadcast).
cudaError_t launch_rotary(bool bf16, bool backward, const void* x, const int64_t* x_strides, const void* cos,
                          const void* sin, const int64_t* cs_strides, void* out, const int64_t* out_strides, int64_t B,
                          int64_t H, int64_t S, int64_t h, cudaStream_t stream) {
  Strides4 xs, cs, os;
  for (int k = 0; k < 4; ++k) xs.s[k] = x_strides[k], cs.s[k] = cs_strides[k], os.s[k] = out_strides[k];
  if (bf16)
    return backward ? launch<__nv_bfloat16, true>(x, xs, cos, sin, cs, out, os, B, H, S, h, stream)
                    : launch<__nv_bfloat16, false>(x, xs, cos, sin, cs, out, os, B, H, S, h, stream);
  return backward ? launch<float, true>(x, xs, cos, sin, cs, out, os, B, H, S, h, stream)
                  : launch<float, false>(x, xs, cos, sin, cs, out, os, B, H, S, h, stream);
}

}  // namespace kernels
}  // namespace quartet
