// The nucleus of top-p sampling, row by row, without sorting the vocabulary (model/decode_kernels.hpp
// top_p_keys): a radix select over the logits' order keys, weighted by probability. Plain CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

constexpr int kThreads = 1024;
// Probabilities in fixed point (2^31 a unit, so that a row's whole mass fits 32 bits): integer
// sums do not depend on the order the threads add in, so the nucleus is the same on every run.
constexpr double kUnit = 2147483648.0;

// A block-wide reduction in a fixed order (each thread's own sum, then fixed shuffles): the
// same result on every run. op: max or sum.
template <typename Op>
__device__ float block_reduce(float v, float* scratch, Op op) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch free from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) v = op(v, scratch[w]);
  return v;
}

// Row `blockIdx.x` of logits [B, V] (row stride ld): the order key k* of its nucleus's least
// likely token under softmax(logits / t), the nucleus being the fewest most likely tokens whose
// probability reaches top_p (HF's TopPLogitsWarper; tokens tied with the last are all kept).
// Four passes of 8 bits from the key's top: each histograms the probability of the tokens that
// share the bits found so far and keeps the bin where the mass from the top reaches top_p.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    top_p_keys_kernel(const T* __restrict__ logits, int64_t ld, int V, float t, uint64_t target,
                      uint32_t* __restrict__ keys) {
  __shared__ float scratch[kThreads / 32];
  __shared__ unsigned long long hist[256];
  __shared__ uint32_t prefix_s;
  __shared__ unsigned long long above_s;
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, load(x[i]));
  m = block_reduce(m, scratch, [](float a, float b) { return fmaxf(a, b); });
  float z = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) z += expf((load(x[i]) - m) / t);
  z = block_reduce(z, scratch, [](float a, float b) { return a + b; });
  const double scale = kUnit / static_cast<double>(z);
  uint32_t prefix = 0;
  unsigned long long above = 0;  // the mass of the tokens above the bins kept so far
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    // Whole warps each round (the tail's lanes idle), so that lanes of a bin add up among
    // themselves first: one shared atomic per bin a warp instead of one per token (an untrained
    // model's flat logits put most tokens in a handful of bins).
    for (int base = 0; base < V; base += blockDim.x) {
      const int i = base + threadIdx.x;
      int bin = -1;
      unsigned q = 0;
      if (i < V) {
        const float v = load(x[i]);
        const uint32_t key = order_key(v);
        if (shift == 24 || (key >> (shift + 8)) == prefix) {
          bin = static_cast<int>((key >> shift) & 255u);
          q = static_cast<unsigned>(static_cast<double>(expf((v - m) / t)) * scale);
        }
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      const unsigned sum = __reduce_add_sync(peers, q);
      if (bin >= 0 && sum > 0 && (threadIdx.x % 32) == static_cast<unsigned>(__ffs(peers) - 1))
        atomicAdd(&hist[bin], static_cast<unsigned long long>(sum));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // From the top bin down, the first where the mass reaches top_p (bin 0 when rounding
      // leaves it short: every token of the bins left is kept).
      unsigned long long cum = above;
      int chosen = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= target) {
          chosen = b;
          break;
        }
        cum += hist[b];
      }
      prefix_s = (prefix << 8) | static_cast<uint32_t>(chosen);
      above_s = cum;
    }
    __syncthreads();
    prefix = prefix_s;
    above = above_s;
  }
  if (threadIdx.x == 0) keys[blockIdx.x] = prefix;
}

}  // namespace

cudaError_t launch_top_p_keys(bool bf16, const void* logits, int64_t ld, int B, int V, float t, double top_p,
                              uint32_t* keys, cudaStream_t stream) {
  const auto target = static_cast<uint64_t>(top_p * kUnit);  // below 2^31: top_p < 1
  if (bf16)
    top_p_keys_kernel<__nv_bfloat16><<<B, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(logits), ld, V, t,
                                                                  target, keys);
  else
    top_p_keys_kernel<float><<<B, kThreads, 0, stream>>>(static_cast<const float*>(logits), ld, V, t, target, keys);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
