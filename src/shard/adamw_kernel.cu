// The flat AdamW step (shard/adamw_kernel.hpp). Plain CUDA, no LibTorch headers: the C++ side
// checks the tensors and passes raw pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {

// One stretch of adamw_step_many (the C++ side fills these; adamw_kernel.cpp declares the same).
struct AdamWManyStretch {
  float* p;
  const void* g;  // null: no gradient
  int grad_kind;  // 0 float32, 1 bfloat16
  float* m;
  float* v;
  void* model;    // null: no bfloat16 copy to write
  int64_t n;
  float lr_decay;
};
constexpr int kManyMaxStretches = 48;  // 48 descriptors of 64 bytes and their first blocks: < 4 KB of arguments

namespace {

struct Hyper {
  float lr_decay;   // lr * weight_decay
  float beta1, beta2, eps;
  float step_size;  // lr / (1 - beta1^step)
  float bc2_sqrt;   // sqrt(1 - beta2^step)
};

// _fused_adamw_'s arithmetic for one element (ATen's fused_adam_utils.cuh), in float32. The
// multiply-adds are spelled out (__fmaf_rn, __fmul_rn): left to the compiler, which products it
// fuses can differ from one kernel to the next, and so the last bit between this file's kernels.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const Hyper& h) {
  p = __fmaf_rn(-h.lr_decay, p, p);
  m = __fmaf_rn(h.beta1, m, __fmul_rn(1.0f - h.beta1, g));
  v = __fmaf_rn(h.beta2, v, __fmul_rn(__fmul_rn(1.0f - h.beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(sqrtf(v), h.bc2_sqrt), h.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(h.step_size, m), denom));
}

// The gradient of element i of a stretch: float32 or bfloat16 (as autograd returned it), or
// G = void for a parameter without one (zero: the decay and the moments' decay still apply).
// VEC = 4 loads 16 bytes of float32 or 8 of bfloat16.
template <int VEC, typename G>
__device__ __forceinline__ void load_grad(const G* __restrict__ g, int64_t i, float (&out)[VEC]) {
  if constexpr (std::is_void_v<G>) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = 0.0f;
  } else {
    load_vec<VEC>(g + i * VEC, out);
  }
}

// Grid-stride over groups of VEC elements (VEC = 4: 16-byte loads of each float32 array).
template <int VEC, bool kModel, typename G>
__global__ void adamw_kernel(float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, __nv_bfloat16* __restrict__ model, int64_t groups, Hyper h,
                             const float* __restrict__ grad_scale, const float* __restrict__ found_inf) {
  if (found_inf && *found_inf != 0.0f) return;  // a non-finite gradient: the step is skipped
  const float scale = grad_scale ? *grad_scale : 1.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float pr[VEC], gr[VEC], mr[VEC], vr[VEC];
    load_grad<VEC>(g, i, gr);
    if constexpr (VEC == 4) {
      *reinterpret_cast<float4*>(pr) = reinterpret_cast<const float4*>(p)[i];
      *reinterpret_cast<float4*>(mr) = reinterpret_cast<const float4*>(m)[i];
      *reinterpret_cast<float4*>(vr) = reinterpret_cast<const float4*>(v)[i];
    } else {
      pr[0] = p[i], mr[0] = m[i], vr[0] = v[i];
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) adamw_element(pr[j], gr[j] / scale, mr[j], vr[j], h);
    if constexpr (VEC == 4) {
      reinterpret_cast<float4*>(p)[i] = *reinterpret_cast<float4*>(pr);
      reinterpret_cast<float4*>(m)[i] = *reinterpret_cast<float4*>(mr);
      reinterpret_cast<float4*>(v)[i] = *reinterpret_cast<float4*>(vr);
    } else {
      p[i] = pr[0], m[i] = mr[0], v[i] = vr[0];
    }
    if constexpr (kModel) {
      if constexpr (VEC == 4) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(pr[0], pr[1]), hi = __floats2bfloat162_rn(pr[2], pr[3]);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        reinterpret_cast<uint2*>(model)[i] = packed;
      } else {
        model[i] = __float2bfloat16_rn(pr[0]);
      }
    }
  }
}

template <int VEC, typename G>
cudaError_t launch(float* p, const G* g, float* m, float* v, __nv_bfloat16* model, int64_t groups, const Hyper& h,
                   const float* grad_scale, const float* found_inf, cudaStream_t stream) {
  if (groups == 0) return cudaSuccess;
  constexpr int threads = 256;
  const int blocks = grid_stride_blocks(groups, threads);
  if (model)
    adamw_kernel<VEC, true, G><<<blocks, threads, 0, stream>>>(p, g, m, v, model, groups, h, grad_scale, found_inf);
  else
    adamw_kernel<VEC, false, G><<<blocks, threads, 0, stream>>>(p, g, m, v, model, groups, h, grad_scale, found_inf);
  return cudaGetLastError();
}

// Elements [0, n) of the given pointers (already offset to the stretch's start): the aligned
// body in vectors of 4, the rest one by one.
template <typename G>
cudaError_t launch_stretch(float* p, const G* g, float* m, float* v, __nv_bfloat16* out, int64_t n, const Hyper& h,
                           const float* grad_scale, const float* found_inf, cudaStream_t stream) {
  auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  constexpr uintptr_t grad_vector = std::is_same_v<G, float> ? 16 : std::is_void_v<G> ? 1 : 8;
  int64_t body = 0;
  if (aligned(p, 16) && aligned(g, grad_vector) && aligned(m, 16) && aligned(v, 16) && (!out || aligned(out, 8)))
    body = n / 4 * 4;
  cudaError_t err = launch<4, G>(p, g, m, v, out, body / 4, h, grad_scale, found_inf, stream);
  if (err != cudaSuccess || body == n) return err;
  const G* g_tail = g;
  if constexpr (!std::is_void_v<G>) g_tail = g + body;
  return launch<1, G>(p + body, g_tail, m + body, v + body, out ? out + body : nullptr, n - body, h, grad_scale,
                      found_inf, stream);
}

// Many stretches in one launch (adamw_step_many): their descriptors travel as the kernel's
// argument, as ATen's multi-tensor kernels pass theirs, and each block takes one chunk of
// kChunk elements of one stretch (found by a binary search over the stretches' first blocks).
// The arithmetic per element is adamw_element's, so the bits are those of one launch each.
constexpr int kManyThreads = 256;
constexpr int64_t kChunk = kManyThreads * 4 * 16;  // 16 vectors of 4 per thread

struct ManyStretch {
  float* p;
  const void* g;  // grad_kind 0: float32, 1: bfloat16, 2: none
  float* m;
  float* v;
  __nv_bfloat16* model;  // may be null
  int64_t n;
  float lr_decay;
  int grad_kind;
  int vectorized;  // every pointer aligned for 4-element vectors
};

struct ManyBatch {
  ManyStretch s[kManyMaxStretches];
  int first_block[kManyMaxStretches + 1];  // chunks before each stretch; the last entry: all
  int count;
};

// The stretch block b works on: the last whose first block is b or before (a binary search
// over a launch's stretches, first_block ascending).
__device__ __forceinline__ int stretch_of_block(const int* first_block, int count, int b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float grad_at(const ManyStretch& s, int64_t i) {
  if (s.grad_kind == 0) return static_cast<const float*>(s.g)[i];
  if (s.grad_kind == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(s.g)[i]);
  return 0.0f;
}

__global__ void __launch_bounds__(kManyThreads)
    adamw_many_kernel(const ManyBatch batch, Hyper h, const float* __restrict__ grad_scale,
                      const float* __restrict__ found_inf) {
  if (found_inf && *found_inf != 0.0f) return;
  const float scale = grad_scale ? *grad_scale : 1.0f;
  const int b = static_cast<int>(blockIdx.x);
  const int lo = stretch_of_block(batch.first_block, batch.count, b);
  const ManyStretch& s = batch.s[lo];
  h.lr_decay = s.lr_decay;
  const int64_t begin = static_cast<int64_t>(b - batch.first_block[lo]) * kChunk;
  const int64_t end = begin + kChunk < s.n ? begin + kChunk : s.n;
  if (s.vectorized) {
    for (int64_t i = begin / 4 + threadIdx.x; i < end / 4; i += kManyThreads) {
      float pr[4], gr[4], mr[4], vr[4];
      *reinterpret_cast<float4*>(pr) = reinterpret_cast<const float4*>(s.p)[i];
      *reinterpret_cast<float4*>(mr) = reinterpret_cast<const float4*>(s.m)[i];
      *reinterpret_cast<float4*>(vr) = reinterpret_cast<const float4*>(s.v)[i];
      if (s.grad_kind == 0) load_grad<4>(static_cast<const float*>(s.g), i, gr);
      else if (s.grad_kind == 1) load_grad<4>(static_cast<const __nv_bfloat16*>(s.g), i, gr);
      else load_grad<4, void>(nullptr, i, gr);
#pragma unroll
      for (int j = 0; j < 4; ++j) adamw_element(pr[j], gr[j] / scale, mr[j], vr[j], h);
      reinterpret_cast<float4*>(s.p)[i] = *reinterpret_cast<float4*>(pr);
      reinterpret_cast<float4*>(s.m)[i] = *reinterpret_cast<float4*>(mr);
      reinterpret_cast<float4*>(s.v)[i] = *reinterpret_cast<float4*>(vr);
      if (s.model) {
        __nv_bfloat162 lo2 = __floats2bfloat162_rn(pr[0], pr[1]), hi2 = __floats2bfloat162_rn(pr[2], pr[3]);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo2);
        packed.y = *reinterpret_cast<uint32_t*>(&hi2);
        reinterpret_cast<uint2*>(s.model)[i] = packed;
      }
    }
    // The stretch's last n % 4 elements (only its last chunk has them).
    for (int64_t i = end / 4 * 4 + threadIdx.x; i < end; i += kManyThreads) {
      float p = s.p[i], m = s.m[i], v = s.v[i];
      adamw_element(p, grad_at(s, i) / scale, m, v, h);
      s.p[i] = p, s.m[i] = m, s.v[i] = v;
      if (s.model) s.model[i] = __float2bfloat16_rn(p);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kManyThreads) {
      float p = s.p[i], m = s.m[i], v = s.v[i];
      adamw_element(p, grad_at(s, i) / scale, m, v, h);
      s.p[i] = p, s.m[i] = m, s.v[i] = v;
      if (s.model) s.model[i] = __float2bfloat16_rn(p);
    }
  }
}

// dst (float32) = src (bfloat16) converted, or += it: a gradient landing in its shard. Groups of
// VEC = 8 (a 16-byte load, two 16-byte stores) where aligned.
template <int VEC, bool kAdd>
__global__ void land_gradient_kernel(float* __restrict__ dst, const __nv_bfloat16* __restrict__ src, int64_t groups) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float in[VEC], out[VEC];
    float* d = dst + i * VEC;
    load_vec<VEC>(src + i * VEC, in);  // VEC = 8: one 16-byte load
    if constexpr (kAdd) {
      load_vec<(VEC < 4 ? VEC : 4)>(d, out);  // float32: 16 bytes at a time
      if constexpr (VEC == 8) load_vec<4>(d + 4, out + 4);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = kAdd ? out[k] + in[k] : in[k];
    store_vec<(VEC < 4 ? VEC : 4)>(d, out);
    if constexpr (VEC == 8) store_vec<4>(d + 4, out + 4);
  }
}

template <int VEC>
cudaError_t launch_land(float* dst, const __nv_bfloat16* src, int64_t groups, bool add, cudaStream_t stream) {
  if (groups == 0) return cudaSuccess;
  constexpr int threads = 256;
  const int blocks = grid_stride_blocks(groups, threads);
  if (add)
    land_gradient_kernel<VEC, true><<<blocks, threads, 0, stream>>>(dst, src, groups);
  else
    land_gradient_kernel<VEC, false><<<blocks, threads, 0, stream>>>(dst, src, groups);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_land_gradient(float* dst, const void* src, int64_t n, bool add, cudaStream_t stream) {
  const auto* in = static_cast<const __nv_bfloat16*>(src);
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const int64_t body = aligned ? n / 8 * 8 : 0;
  cudaError_t err = launch_land<8>(dst, in, body / 8, add, stream);
  if (err != cudaSuccess || body == n) return err;
  return launch_land<1>(dst + body, in + body, n - body, add, stream);
}

// Elements [0, n) of the given pointers (already offset to the stretch's start). grad_kind:
// 0 float32, 1 bfloat16, 2 none (g is null: a zero gradient).
cudaError_t launch_adamw(float* p, const void* g, int grad_kind, float* m, float* v, void* model, int64_t n,
                         float lr_decay, float beta1, float beta2, float eps, float step_size, float bc2_sqrt,
                         const float* grad_scale, const float* found_inf, cudaStream_t stream) {
  const Hyper h{lr_decay, beta1, beta2, eps, step_size, bc2_sqrt};
  auto* out = static_cast<__nv_bfloat16*>(model);
  if (grad_kind == 0)
    return launch_stretch(p, static_cast<const float*>(g), m, v, out, n, h, grad_scale, found_inf, stream);
  if (grad_kind == 1)
    return launch_stretch(p, static_cast<const __nv_bfloat16*>(g), m, v, out, n, h, grad_scale, found_inf, stream);
  return launch_stretch(p, static_cast<const void*>(nullptr), m, v, out, n, h, grad_scale, found_inf, stream);
}

cudaError_t launch_adamw_many(const AdamWManyStretch* stretches, int count, float beta1, float beta2, float eps,
                              float step_size, float bc2_sqrt, const float* grad_scale, const float* found_inf,
                              cudaStream_t stream) {
  const Hyper h{0.0f, beta1, beta2, eps, step_size, bc2_sqrt};
  auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  for (int at = 0; at < count; at += kManyMaxStretches) {
    ManyBatch batch{};
    batch.count = 0;
    int64_t blocks = 0;
    for (int k = at; k < count && batch.count < kManyMaxStretches; ++k) {
      const AdamWManyStretch& in = stretches[k];
      if (in.n == 0) continue;
      ManyStretch& s = batch.s[batch.count];
      s.p = in.p, s.g = in.g, s.m = in.m, s.v = in.v, s.model = static_cast<__nv_bfloat16*>(in.model);
      s.n = in.n, s.lr_decay = in.lr_decay, s.grad_kind = in.g ? in.grad_kind : 2;
      const uintptr_t grad_vector = s.grad_kind == 0 ? 16 : s.grad_kind == 1 ? 8 : 1;
      s.vectorized = aligned(s.p, 16) && aligned(s.m, 16) && aligned(s.v, 16) && (!s.g || aligned(s.g, grad_vector)) &&
                     (!s.model || aligned(s.model, 8));
      batch.first_block[batch.count] = static_cast<int>(blocks);
      blocks += (in.n + kChunk - 1) / kChunk;
      ++batch.count;
    }
    if (batch.count == 0) continue;
    batch.first_block[batch.count] = static_cast<int>(blocks);
    adamw_many_kernel<<<static_cast<unsigned>(blocks), kManyThreads, 0, stream>>>(batch, h, grad_scale, found_inf);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// The squared norm that clipping divides by, over many gradients in a few launches: each block
// sums the squares of kNormChunk elements of one gradient (float32 or bfloat16) into its own
// partial, a second kernel sums the partials in a fixed order. ATen's _foreach_norm launches a
// kernel per few dozen tensors and takes each tensor's norm before their sum.
namespace {

constexpr int kNormThreads = 256;
constexpr int64_t kNormChunk = kNormThreads * 8 * 8;  // 8 vectors of 8 per thread
constexpr int kNormMaxStretches = 96;                  // 32-byte descriptors and first blocks: < 4 KB

struct NormStretch {
  const void* g;
  int64_t n;
  int kind;        // 0 float32, 1 bfloat16
  int vectorized;  // 16-byte aligned
};
struct NormBatch {
  NormStretch s[kNormMaxStretches];
  int first_block[kNormMaxStretches + 1];
  int count;
};

template <typename T>
__device__ __forceinline__ float squares(const T* __restrict__ g, int64_t begin, int64_t end, bool vectorized) {
  constexpr int kVec = 16 / sizeof(T);
  float sum = 0.0f;
  int64_t i = begin + threadIdx.x;
  if (vectorized) {
    // begin is a multiple of kNormChunk, so vectors start aligned; the tail goes one by one.
    const int64_t body = begin + (end - begin) / kVec * kVec;
    for (int64_t v = begin / kVec + threadIdx.x; v < body / kVec; v += kNormThreads) {
      float x[kVec];
      load_vec<kVec>(g + v * kVec, x);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum = __fmaf_rn(x[j], x[j], sum);
    }
    i = body + threadIdx.x;
  }
  for (; i < end; i += kNormThreads) {
    const float x = load(g[i]);
    sum = __fmaf_rn(x, x, sum);
  }
  return sum;
}

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[kNormThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sums[w];
  return total;  // thread 0's
}

__global__ void __launch_bounds__(kNormThreads) sq_norm_many_kernel(const NormBatch batch, float* __restrict__ partial) {
  const int b = static_cast<int>(blockIdx.x);
  const int lo = stretch_of_block(batch.first_block, batch.count, b);
  const NormStretch& s = batch.s[lo];
  const int64_t begin = static_cast<int64_t>(b - batch.first_block[lo]) * kNormChunk;
  const int64_t end = begin + kNormChunk < s.n ? begin + kNormChunk : s.n;
  const float mine = s.kind == 0 ? squares(static_cast<const float*>(s.g), begin, end, s.vectorized)
                                 : squares(static_cast<const __nv_bfloat16*>(s.g), begin, end, s.vectorized);
  const float total = block_sum(mine);
  if (threadIdx.x == 0) partial[b] = total;
}

// One block: the partials summed in float64 in a fixed order (each thread a strided share,
// then the threads in order), rounded once to float32.
__global__ void __launch_bounds__(kNormThreads) sum_partials_kernel(const float* __restrict__ partial, int64_t n,
                                                                     float* __restrict__ out) {
  __shared__ double sums[kNormThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) s += partial[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int t = 0; t < kNormThreads; ++t) total += sums[t];
    *out = static_cast<float>(total);
  }
}

}  // namespace

int64_t sq_norm_blocks(const int64_t* n, int count) {
  int64_t blocks = 0;
  for (int k = 0; k < count; ++k) blocks += (n[k] + kNormChunk - 1) / kNormChunk;
  return blocks;
}

cudaError_t launch_sq_norm_many(const void* const* g, const int* kind, const int64_t* n, int count, float* partial,
                                int64_t partials, float* out, cudaStream_t stream) {
  int64_t done = 0;  // blocks launched so far: each launch writes its partials after them
  for (int at = 0; at < count;) {
    NormBatch batch{};
    batch.count = 0;
    int64_t blocks = 0;
    for (; at < count && batch.count < kNormMaxStretches; ++at) {
      if (n[at] == 0) continue;
      NormStretch& s = batch.s[batch.count];
      s.g = g[at], s.n = n[at], s.kind = kind[at];
      s.vectorized = reinterpret_cast<uintptr_t>(g[at]) % 16 == 0;
      batch.first_block[batch.count] = static_cast<int>(blocks);
      blocks += (n[at] + kNormChunk - 1) / kNormChunk;
      ++batch.count;
    }
    if (batch.count == 0) continue;
    batch.first_block[batch.count] = static_cast<int>(blocks);
    sq_norm_many_kernel<<<static_cast<unsigned>(blocks), kNormThreads, 0, stream>>>(batch, partial + done);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    done += blocks;
  }
  if (done != partials) return cudaErrorInvalidValue;
  sum_partials_kernel<<<1, kNormThreads, 0, stream>>>(partial, partials, out);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
