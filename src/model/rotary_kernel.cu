// Rotary embeddings in halves (Llama, NeoX) in one kernel, forward and backward
// (model/rotary.hpp). Plain CUDA, no LibTorch headers: the C++ side checks the tensors and passes
// raw pointers and strides.
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
template <typename T>
__device__ __forceinline__ float rounded(float v) { return load(store<T>(v)); }

struct Strides4 {
  int64_t s[4];
};

// One thread per pair (j, j + h) of a head's D = 2h dims at one (b, head, t):
//   forward   out_j = x_j cos_j - x_{j+h} sin_j,     out_{j+h} = x_{j+h} cos_{j+h} + x_j sin_{j+h}
//   backward  gx_j  = g_j cos_j + g_{j+h} sin_{j+h}, gx_{j+h}  = g_{j+h} cos_{j+h} - g_j sin_j
// each product and the sum rounded to T as ATen's mul, mul, add (and the exact negation) do, so
// the bits are those of x * cos + rotate_half(x) * sin and of its autograd backward.
template <typename T, bool kBackward>
__global__ void rotary_kernel(const T* __restrict__ x, Strides4 xs, const T* __restrict__ cos,
                              const T* __restrict__ sin, Strides4 cs, T* __restrict__ out, Strides4 os, int64_t H,
                              int64_t S, int64_t h, int64_t pairs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int64_t j = i % h;
  int64_t r = i / h;
  const int64_t t = r % S;
  r /= S;
  const int64_t head = r % H, b = r / H;
  const int64_t xo = b * xs.s[0] + head * xs.s[1] + t * xs.s[2];
  const int64_t co = b * cs.s[0] + head * cs.s[1] + t * cs.s[2];
  const int64_t oo = b * os.s[0] + head * os.s[1] + t * os.s[2];
  const float x1 = load(x[xo + j * xs.s[3]]), x2 = load(x[xo + (j + h) * xs.s[3]]);
  const float c1 = load(cos[co + j * cs.s[3]]), c2 = load(cos[co + (j + h) * cs.s[3]]);
  const float s1 = load(sin[co + j * cs.s[3]]), s2 = load(sin[co + (j + h) * cs.s[3]]);
  float o1, o2;
  if constexpr (!kBackward) {
    o1 = __fadd_rn(rounded<T>(__fmul_rn(x1, c1)), -rounded<T>(__fmul_rn(x2, s1)));
    o2 = __fadd_rn(rounded<T>(__fmul_rn(x2, c2)), rounded<T>(__fmul_rn(x1, s2)));
  } else {
    o1 = __fadd_rn(rounded<T>(__fmul_rn(x1, c1)), rounded<T>(__fmul_rn(x2, s2)));
    o2 = __fadd_rn(rounded<T>(__fmul_rn(x2, c2)), -rounded<T>(__fmul_rn(x1, s1)));
  }
  out[oo + j * os.s[3]] = store<T>(o1);
  out[oo + (j + h) * os.s[3]] = store<T>(o2);
}

}  // namespace

// x, out [B, H, S, 2h] and cos, sin [B or 1, 1, S, 2h] (strides in elements; cos and sin share
// theirs, 0 where broadcast).
cudaError_t launch_rotary(bool bf16, bool backward, const void* x, const int64_t* x_strides, const void* cos,
                          const void* sin, const int64_t* cs_strides, void* out, const int64_t* out_strides, int64_t B,
                          int64_t H, int64_t S, int64_t h, cudaStream_t stream) {
  Strides4 xs, cs, os;
  for (int k = 0; k < 4; ++k) xs.s[k] = x_strides[k], cs.s[k] = cs_strides[k], os.s[k] = out_strides[k];
  const int64_t pairs = B * H * S * h;
  if (pairs == 0) return cudaSuccess;
  constexpr int threads = 256;
  const int64_t blocks = (pairs + threads - 1) / threads;
#define QUARTET_ROTARY_LAUNCH(T, BW)                                                                            \
  rotary_kernel<T, BW><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(                                 \
      static_cast<const T*>(x), xs, static_cast<const T*>(cos), static_cast<const T*>(sin), cs, static_cast<T*>(out), \
      os, H, S, h, pairs)
  if (bf16 && backward) QUARTET_ROTARY_LAUNCH(__nv_bfloat16, true);
  else if (bf16) QUARTET_ROTARY_LAUNCH(__nv_bfloat16, false);
  else if (backward) QUARTET_ROTARY_LAUNCH(float, true);
  else QUARTET_ROTARY_LAUNCH(float, false);
#undef QUARTET_ROTARY_LAUNCH
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
