// softmax(scores + bias) of the ATen attention path's decoding step, without baddbmm's copy of
// the bias (model/decode_kernels.hpp masked_softmax). Plain CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// softmax(scores + bias) along rows of S, one warp per row, in float32 and rounded once to T:
// ATen's softmax (float32 inside, exp(x - max) / sum) of what baddbmm(bias, ...) rounds, when
// bias holds only 0 and -inf and the scores come from baddbmm with beta = 0 (x + 0 and x + -inf
// are exact). Saves baddbmm's copy of the bias into its output, a memcpy per layer.
template <typename T>
__global__ void masked_softmax_kernel(const T* __restrict__ scores, const T* __restrict__ bias, T* __restrict__ out,
                                      int R, int S) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= R) return;
  const T* s = scores + static_cast<int64_t>(row) * S;
  const T* b = bias + static_cast<int64_t>(row) * S;
  float m = -INFINITY;
  for (int j = lane; j < S; j += 32) m = fmaxf(m, load(s[j]) + load(b[j]));
  m = warp_max(m);
  float sum = 0.f;
  for (int j = lane; j < S; j += 32) sum += expf(load(s[j]) + load(b[j]) - m);
  sum = warp_sum(sum);
  T* o = out + static_cast<int64_t>(row) * S;
  for (int j = lane; j < S; j += 32) o[j] = store<T>(expf(load(s[j]) + load(b[j]) - m) / sum);
}

}  // namespace

cudaError_t launch_masked_softmax(bool bf16, const void* scores, const void* bias, void* out, int R, int S,
                                  cudaStream_t stream) {
  const int warps = 8, blocks = (R + warps - 1) / warps;
  if (bf16) {
    using T = __nv_bfloat16;
    masked_softmax_kernel<T><<<blocks, warps * 32, 0, stream>>>(static_cast<const T*>(scores),
                                                               static_cast<const T*>(bias), static_cast<T*>(out), R, S);
  } else {
    masked_softmax_kernel<float><<<blocks, warps * 32, 0, stream>>>(
        static_cast<const float*>(scores), static_cast<const float*>(bias), static_cast<float*>(out), R, S);
  }
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
