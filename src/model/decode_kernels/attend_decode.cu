// One decoding step's attention (model/decode_kernels.hpp attend_decode, attend_decode_qkv): in
// registers for bfloat16 heads of 128, staged through shared memory in chunks for the other
// shapes, the span split over blocks (flash decoding) where rows x KV heads leave the GPU idle,
// and the splits merged. Plain CUDA, no LibTorch headers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// One decoding step's attention for one (row, KV head) per block: the g query heads sharing
// that KV head against the cache's first `span` slots, with the additive mask `bias` (element
// [row * nkv + kv, j, slot] at (row * nkv + kv) * bias_s0 + j * bias_s1 + slot). Scores,
// softmax and the weighted sum of values stay in float32 (online softmax over chunks of
// `chunk` slots) and the output is rounded to T once. Each chunk of keys and values is copied
// to shared memory with asynchronous 16-byte copies, all in flight at once: decoding reads
// the cache at HBM speed only with many requests outstanding. Replaces baddbmm + softmax +
// bmm (which round scores and probabilities to T).
// DPL: output dimensions per lane (hd <= 32 * DPL); VEC: key elements per shared-memory load.
constexpr int kAttnWarps = 4;
constexpr int kMaxGroup = 8;
constexpr int kChunkBytes = 8192;  // keys (and as much for values) per chunk, two chunks in flight
constexpr int kMaxSplits = 64;

// Slots per chunk: chunk_bytes (0: kChunkBytes) of keys, at most 64 (the scores' share of
// shared memory).
inline int attend_chunk(int hd, size_t elt, int chunk_bytes) {
  return max(1, min(64, (chunk_bytes > 0 ? chunk_bytes : kChunkBytes) / (hd * static_cast<int>(elt))));
}
// Splits of the span over blocks (flash decoding): enough blocks to fill the GPU twice over
// when rows x KV heads do not, each split keeping two chunks or more so that its copies
// overlap its arithmetic. max_splits > 0 sets them instead (benchmarks compare).
inline int attend_splits(int span, int chunk, int max_splits, int blocks, int sms) {
  const int chunks = (span + chunk - 1) / chunk;
  if (max_splits > 0) return max(1, min(max_splits, chunks));
  const int want = (2 * sms + blocks - 1) / max(blocks, 1);
  return max(1, min(min(want, kMaxSplits), (chunks + 1) / 2));
}

// `bytes` from global src to shared dst by all threads of the block: asynchronous copies of 16
// or 4 bytes where both ends and the length allow, else (synchronously) 2-byte words.
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src, int bytes) {
  const auto both = [&](int a) {
    return reinterpret_cast<uintptr_t>(src) % a == 0 && reinterpret_cast<uintptr_t>(dst) % a == 0 && bytes % a == 0;
  };
  if (both(16)) {
    for (int i = threadIdx.x * 16; i < bytes; i += blockDim.x * 16) {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(static_cast<char*>(dst) + i));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(static_cast<const char*>(src) + i));
    }
  } else if (both(4)) {
    for (int i = threadIdx.x * 4; i < bytes; i += blockDim.x * 4) {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(static_cast<char*>(dst) + i));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(static_cast<const char*>(src) + i));
    }
  } else {
    for (int i = threadIdx.x * 2; i < bytes; i += blockDim.x * 2)
      *reinterpret_cast<uint16_t*>(static_cast<char*>(dst) + i) =
          *reinterpret_cast<const uint16_t*>(static_cast<const char*>(src) + i);
  }
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_copies_but_latest() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_all;\n" ::); }

// DPL consecutive elements at p into float, in 8-byte loads where they fill whole ones.
template <int DPL, typename T>
__device__ __forceinline__ void load_dims(const T* p, float* out) {
  if constexpr ((DPL * sizeof(T)) % 8 == 0) {
    constexpr int kWords = DPL * sizeof(T) / 8;
    uint2 raw[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) raw[w] = reinterpret_cast<const uint2*>(p)[w];
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int i = 0; i < DPL; ++i) out[i] = load(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) out[i] = load(p[i]);
  }
}

template <typename T, typename TB, int DPL, int VEC>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attend_decode_kernel(const T* __restrict__ q, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                         const TB* __restrict__ bias, int64_t bias_s0, int64_t bias_s1, T* __restrict__ out,
                         float* __restrict__ partial, int nkv, int g, int hd, int span, int chunk, int split_len,
                         int64_t cache_row, int64_t cache_head, float scale, const int64_t* __restrict__ last_slot) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Two buffers of [chunk, hd] keys then [chunk, hd] values: one being copied in while the
  // other is worked on.
  T* const kv_buffers = reinterpret_cast<T*>(smem_raw);
  // Two buffers of the mask's [g, chunk] slots, copied in with the keys and values (a global
  // read per score would put its latency on every round), then [g, hd] the queries in
  // float32; each 16-byte aligned (as the launch sized them).
  const size_t kv_end = (4 * static_cast<size_t>(chunk) * hd * sizeof(T) + 15) / 16 * 16;
  TB* const bias_buffers = reinterpret_cast<TB*>(smem_raw + kv_end);
  float* qs = reinterpret_cast<float*>(smem_raw + kv_end + (2 * static_cast<size_t>(g) * chunk * sizeof(TB) + 15) / 16 * 16);
  float* scores = qs + g * hd;                            // [g, chunk] scores, then probabilities
  float* stat = scores + g * chunk;                       // m[g], l[g], corr[g]
  float* part = stat + 3 * kMaxGroup;                     // [warps, hd] for the final sum over warps
  float *m = stat, *l = stat + kMaxGroup, *corr = stat + 2 * kMaxGroup;
  const int bk = blockIdx.x, b = bk / nkv, kv = bk % nkv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const T* qp = q + static_cast<int64_t>(bk) * g * hd;  // heads kv*g .. kv*g+g-1 of row b
  const T* kp = k_cache + b * cache_row + kv * cache_head;
  const T* vp = v_cache + b * cache_row + kv * cache_head;
  const TB* bp = bias + bk * bias_s0;
  for (int i = tid; i < g * hd; i += blockDim.x) qs[i] = load(qp[i]);
  if (tid < g) m[tid] = -INFINITY, l[tid] = 0.f;
  float acc[kMaxGroup][DPL];
#pragma unroll
  for (int j = 0; j < kMaxGroup; ++j)
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[j][i] = 0.f;
  const int group = tid / 8, sub = tid % 8, groups = blockDim.x / 8;
  // Split-K (flash decoding): block (bk, split) takes slots [split * split_len, + split_len),
  // none after *last_slot (masked: a split past it reads nothing, and its maximum of -inf is
  // skipped when the splits combine).
  const int live = last_slot ? min(span, static_cast<int>(*last_slot) + 1) : span;
  const int split = blockIdx.y, s_begin = split * split_len, s_end = min(live, s_begin + split_len);
  // A cache's slots lie back to back, so a chunk is one contiguous run of bytes.
  auto copy_chunk = [&](int c0, int buf) {
    const int bytes = min(chunk, s_end - c0) * hd * static_cast<int>(sizeof(T));
    T* kb = kv_buffers + static_cast<size_t>(buf) * 2 * chunk * hd;
    copy_to_shared(kb, kp + static_cast<int64_t>(c0) * hd, bytes);
    copy_to_shared(kb + chunk * hd, vp + static_cast<int64_t>(c0) * hd, bytes);
    TB* bb = bias_buffers + static_cast<size_t>(buf) * g * chunk;
    for (int j = 0; j < g; ++j)
      copy_to_shared(bb + j * chunk, bp + j * bias_s1 + c0, min(chunk, s_end - c0) * static_cast<int>(sizeof(TB)));
    commit_copies();
  };
  if (s_begin < s_end) copy_chunk(s_begin, 0);
  int buf = 0;
  for (int c0 = s_begin; c0 < s_end; c0 += chunk, buf ^= 1) {
    const int n = min(chunk, s_end - c0);
    if (c0 + chunk < s_end) {
      copy_chunk(c0 + chunk, buf ^ 1);  // the next chunk flows in while this one is worked on
      wait_copies_but_latest();
    } else {
      wait_copies();
    }
    __syncthreads();
    const T* ks = kv_buffers + static_cast<size_t>(buf) * 2 * chunk * hd;
    const T* vs = ks + chunk * hd;
    const TB* bs = bias_buffers + static_cast<size_t>(buf) * g * chunk;
    // Scores: 8 lanes per key, each VEC consecutive elements at a time; every lane runs the
    // same number of rounds (the shuffles need the whole warp).
    for (int t0 = 0; t0 < n; t0 += groups) {
      const int t = t0 + group;
      const bool valid = t < n;
      const T* krow = ks + t * hd;
      float dot[kMaxGroup];
#pragma unroll
      for (int j = 0; j < kMaxGroup; ++j) dot[j] = 0.f;
      for (int e0 = sub * VEC; valid && e0 < hd; e0 += 8 * VEC) {
        float kf[VEC];
        load_vec<VEC>(krow + e0, kf);
#pragma unroll
        for (int j = 0; j < kMaxGroup; ++j)
          if (j < g) {
            if constexpr (VEC % 4 == 0) {
              // e0 is a multiple of VEC and hd of 8 VEC: whole, aligned float4s of the queries.
              const float4* q4 = reinterpret_cast<const float4*>(qs + j * hd + e0);
#pragma unroll
              for (int v = 0; v < VEC / 4; ++v) {
                const float4 qv = q4[v];
                dot[j] = fmaf(qv.x, kf[4 * v], dot[j]);
                dot[j] = fmaf(qv.y, kf[4 * v + 1], dot[j]);
                dot[j] = fmaf(qv.z, kf[4 * v + 2], dot[j]);
                dot[j] = fmaf(qv.w, kf[4 * v + 3], dot[j]);
              }
            } else {
#pragma unroll
              for (int v = 0; v < VEC; ++v) dot[j] = fmaf(qs[j * hd + e0 + v], kf[v], dot[j]);
            }
          }
      }
#pragma unroll
      for (int j = 0; j < kMaxGroup; ++j) {
        if (j >= g) break;
        float d = dot[j];
        d += __shfl_xor_sync(0xffffffffu, d, 4);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        if (valid && sub == 0) scores[j * chunk + t] = d * scale + load(bs[j * chunk + t]);
      }
    }
    __syncthreads();
    // Online softmax: the chunk's maximum, its probabilities, the rescaling of what came before.
    for (int j = warp; j < g; j += kAttnWarps) {
      float mx = -INFINITY;
      for (int t = lane; t < n; t += 32) mx = fmaxf(mx, scores[j * chunk + t]);
      mx = warp_max(mx);
      const float m_old = m[j], m_new = fmaxf(m_old, mx);
      float s = 0.f;
      for (int t = lane; t < n; t += 32) {
        const float p = m_new == -INFINITY ? 0.f : expf(scores[j * chunk + t] - m_new);
        scores[j * chunk + t] = p;
        s += p;
      }
      s = warp_sum(s);
      if (lane == 0) {
        const float c = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        corr[j] = c;
        l[j] = l[j] * c + s;
        m[j] = m_new;
      }
    }
    __syncthreads();
    // Probabilities times values: warps take slots in turn, each lane DPL consecutive dimensions.
#pragma unroll
    for (int j = 0; j < kMaxGroup; ++j)
      if (j < g)
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[j][i] *= corr[j];
    const bool full_rows = hd == 32 * DPL && (hd * sizeof(T)) % 16 == 0;  // every lane's DPL, aligned
    for (int t = warp; t < n; t += kAttnWarps) {
      const T* vrow = vs + t * hd;
      float vf[DPL];
      if (full_rows) {
        load_dims<DPL>(vrow + lane * DPL, vf);
      } else {
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
          const int d = lane * DPL + i;
          vf[i] = d < hd ? load(vrow[d]) : 0.f;
        }
      }
#pragma unroll
      for (int j = 0; j < kMaxGroup; ++j)
        if (j < g) {
          const float p = scores[j * chunk + t];
#pragma unroll
          for (int i = 0; i < DPL; ++i) acc[j][i] = fmaf(p, vf[i], acc[j][i]);
        }
    }
    __syncthreads();  // the copy issued next overwrites this buffer; the scores are rewritten
  }
  // The warps' partial sums, one query head at a time: the output, or with several splits the
  // split's unnormalised sum, maximum and total [g, hd + 2] for attend_combine_kernel.
  T* op = out + static_cast<int64_t>(bk) * g * hd;
  float* pp = gridDim.y > 1 ? partial + (static_cast<int64_t>(bk) * gridDim.y + split) * g * (hd + 2) : nullptr;
#pragma unroll
  for (int j = 0; j < kMaxGroup; ++j) {
    if (j >= g) break;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = lane * DPL + i;
      if (d < hd) part[warp * hd + d] = acc[j][i];
    }
    __syncthreads();
    for (int d = tid; d < hd; d += blockDim.x) {
      float s = 0.f;
      for (int w = 0; w < kAttnWarps; ++w) s += part[w * hd + d];
      if (gridDim.y == 1)
        op[j * hd + d] = store<T>(s / l[j]);
      else
        pp[j * (hd + 2) + d] = s;
    }
    if (gridDim.y > 1 && tid == 0) pp[j * (hd + 2) + hd] = m[j], pp[j * (hd + 2) + hd + 1] = l[j];
    __syncthreads();
  }
}

// The splits of attend_decode_kernel merged: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
template <typename T>
__global__ void attend_combine_kernel(const float* __restrict__ partial, T* __restrict__ out, int g, int hd,
                                      int splits) {
  const int bk = blockIdx.x;
  const float* pp = partial + static_cast<int64_t>(bk) * splits * g * (hd + 2);
  for (int j = 0; j < g; ++j) {
    float M = -INFINITY;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, pp[(s * g + j) * (hd + 2) + hd]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float L = 0.f, acc = 0.f;
      for (int s = 0; s < splits; ++s) {
        const float* q = pp + (s * g + j) * (hd + 2);
        if (q[hd] == -INFINITY) continue;  // a split whose slots are all masked
        const float f = expf(q[hd] - M);
        L = fmaf(q[hd + 1], f, L);
        acc = fmaf(q[d], f, acc);
      }
      out[(static_cast<int64_t>(bk) * g + j) * hd + d] = store<T>(acc / L);
    }
  }
}

// Decode attention for bfloat16 heads of 128 with G query heads per KV head, in registers: no
// shared-memory staging and no barrier until the end. Block (row * nkv + kv, split) has kWarpsW
// warps; a warp reads two slots per load instruction (a half-warp per slot, 16 bytes a lane:
// 512 contiguous bytes of keys, and as many of values) and keeps kPairs such pairs in flight.
// Each half-warp keeps its own online softmax (maximum, total, 8 output dimensions a lane) over
// its slots; the halves, then the warps, merge at the end (out = sum_w acc_w e^(m_w - M) /
// sum_w l_w e^(m_w - M)). Scores and probabilities in float32, the output rounded once, as
// attend_decode_kernel; only the order of the sums differs.
constexpr int kWarpsW = 4;
constexpr int kPairs = 4;
constexpr int kWarpHd = 128;
}  // namespace

// attend_warps_kernel's queries from the step's fused q/k/v product instead of q (qkv non-null):
// the block rotates its queries itself, and the block whose split holds *slot first writes the
// step's key (rotated) and value into the cache there, as qkv_to_cache does: one kernel instead
// of two, the same bits. qkv [B, nh + 2 nkv, 128], cos and sin_signed [B, 128].
struct QkvSource {
  const __nv_bfloat16* qkv = nullptr;
  const __nv_bfloat16* cos = nullptr;
  const __nv_bfloat16* sin_signed = nullptr;
  const int64_t* slot = nullptr;
  int nh = 0;
};

bool attend_in_registers(bool bf16, int g, int hd) {
  return bf16 && hd == kWarpHd && (g == 1 || g == 2 || g == 4 || g == 8);
}

namespace {

template <typename TB, int G>
__global__ void __launch_bounds__(kWarpsW * 32)
    attend_warps_kernel(const __nv_bfloat16* __restrict__ q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                        const TB* __restrict__ bias, int64_t bias_s0, int64_t bias_s1,
                        __nv_bfloat16* __restrict__ out, float* __restrict__ partial, int nkv, int span,
                        int split_len, int64_t cache_row, int64_t cache_head, float scale,
                        const int64_t* __restrict__ last_slot, QkvSource src) {
  constexpr int hd = kWarpHd;
  __shared__ float merged[kWarpsW][G][hd + 2];  // each warp's acc, then m and l
  const int bk = blockIdx.x, b = bk / nkv, kv = bk % nkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane / 16, hl = lane % 16;
  // Slots after *last_slot hold nothing yet (masked): not read. A split past it reads none and
  // leaves a maximum of -inf, which the combining kernel skips. Each slot read keeps its warp and
  // half, so what is read is summed in the same order: the same bits as reading the whole span.
  const int live = last_slot ? min(span, static_cast<int>(*last_slot) + 1) : span;
  const int split = blockIdx.y, s_begin = split * split_len, s_end = min(live, s_begin + split_len);
  const __nv_bfloat16* kp = k_cache + b * cache_row + kv * cache_head + hl * 8;
  const __nv_bfloat16* vp = v_cache + b * cache_row + kv * cache_head + hl * 8;
  const TB* bp = bias + bk * bias_s0;
  const __nv_bfloat16* row = nullptr;  // fused: this row's q/k/v product
  if (src.qkv) {
    row = src.qkv + static_cast<int64_t>(b) * (src.nh + 2 * nkv) * hd;
    const int64_t slot = *src.slot;
    if (min(static_cast<int>(slot / split_len), static_cast<int>(gridDim.y) - 1) == split) {
      // One thread per element (the block's 128 threads, hd = 128): the step's key and value.
      const int j = threadIdx.x;
      const int64_t at = b * cache_row + kv * cache_head + slot * hd + j;
      k_cache[at] = rotate_half_split(row + (src.nh + kv) * hd, src.cos + b * hd, src.sin_signed + b * hd, j, hd);
      v_cache[at] = row[(src.nh + nkv + kv) * hd + j];
    }
    __syncthreads();  // the slot's key and value visible to the block's reads below (L2: __ldcg)
  }
  float qf[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    if (row) {
      const __nv_bfloat16* head = row + (kv * G + j) * hd;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        qf[j][i] = load(rotate_half_split(head, src.cos + b * hd, src.sin_signed + b * hd, hl * 8 + i, hd));
    } else {
      load_vec<8>(q + (static_cast<int64_t>(bk) * G + j) * hd + hl * 8, qf[j]);
    }
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[j][i] = 0.f;
  }
  const int pairs = (s_end - s_begin + 1) / 2;
  // Every lane runs the same rounds (the shuffles need the whole warp); slots past the split
  // load nothing and score -inf.
  for (int p0 = warp; p0 < pairs; p0 += kWarpsW * kPairs) {
    uint4 kr[kPairs], vr[kPairs];
    int t[kPairs];
#pragma unroll
    for (int u = 0; u < kPairs; ++u) {  // every load first: kPairs x 1 KB in flight per warp
      t[u] = s_begin + 2 * (p0 + u * kWarpsW) + half;
      if (t[u] < s_end) {
        // Read at L2 (cache-global): coherent with this kernel's own writes of the step's slot.
        kr[u] = __ldcg(reinterpret_cast<const uint4*>(kp + static_cast<int64_t>(t[u]) * hd));
        vr[u] = __ldcg(reinterpret_cast<const uint4*>(vp + static_cast<int64_t>(t[u]) * hd));
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = kr[u];
      }
    }
    float sc[kPairs][G];
#pragma unroll
    for (int u = 0; u < kPairs; ++u) {
      float kf[8];
      load_vec<8>(reinterpret_cast<const __nv_bfloat16*>(&kr[u]), kf);
#pragma unroll
      for (int j = 0; j < G; ++j) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qf[j][i], kf[i], d);
        d += __shfl_xor_sync(0xffffffffu, d, 8);  // within the half-warp: the slot's 16 lanes
        d += __shfl_xor_sync(0xffffffffu, d, 4);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        sc[u][j] = t[u] < s_end ? d * scale + load(bp[j * bias_s1 + t[u]]) : -INFINITY;
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float mx = m[j];
#pragma unroll
      for (int u = 0; u < kPairs; ++u) mx = fmaxf(mx, sc[u][j]);
      if (mx == -INFINITY) continue;  // nothing visible yet on this half
      const float c = m[j] == -INFINITY ? 0.f : expf(m[j] - mx);
      l[j] *= c;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[j][i] *= c;
      m[j] = mx;
#pragma unroll
      for (int u = 0; u < kPairs; ++u) {
        const float pr = expf(sc[u][j] - mx);  // 0 for a masked or absent slot
        l[j] += pr;
        float vf[8];
        load_vec<8>(reinterpret_cast<const __nv_bfloat16*>(&vr[u]), vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[j][i] = fmaf(pr, vf[i], acc[j][i]);
      }
    }
  }
  // The two halves of the warp, then the warps of the block.
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const float mo = __shfl_xor_sync(0xffffffffu, m[j], 16), lo = __shfl_xor_sync(0xffffffffu, l[j], 16);
    const float M = fmaxf(m[j], mo);
    const float f = m[j] == -INFINITY ? 0.f : expf(m[j] - M), fo = mo == -INFINITY ? 0.f : expf(mo - M);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float ao = __shfl_xor_sync(0xffffffffu, acc[j][i], 16);
      acc[j][i] = acc[j][i] * f + ao * fo;
    }
    l[j] = l[j] * f + lo * fo;
    m[j] = M;
    if (half == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) merged[warp][j][hl * 8 + i] = acc[j][i];
      if (hl == 0) merged[warp][j][hd] = m[j], merged[warp][j][hd + 1] = l[j];
    }
  }
  __syncthreads();
  __nv_bfloat16* op = out + static_cast<int64_t>(bk) * G * hd;
  float* pp = gridDim.y > 1 ? partial + (static_cast<int64_t>(bk) * gridDim.y + split) * G * (hd + 2) : nullptr;
  for (int x = threadIdx.x; x < G * hd; x += blockDim.x) {
    const int j = x / hd, d = x % hd;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarpsW; ++w) M = fmaxf(M, merged[w][j][hd]);
    float L = 0.f, S = 0.f;
#pragma unroll
    for (int w = 0; w < kWarpsW; ++w) {
      const float mw = merged[w][j][hd];
      if (mw == -INFINITY) continue;  // a warp that saw no visible slot
      const float f = expf(mw - M);
      L = fmaf(merged[w][j][hd + 1], f, L);
      S = fmaf(merged[w][j][d], f, S);
    }
    if (gridDim.y == 1) {
      op[j * hd + d] = store<__nv_bfloat16>(S / L);
    } else {
      pp[j * (hd + 2) + d] = S;
      if (d == 0) pp[j * (hd + 2) + hd] = M, pp[j * (hd + 2) + hd + 1] = L;
    }
  }
}

// Whether attend_warps_kernel takes the launch (no chunk size asked for), and its splits: as
// attend_splits chooses them, a round of the block's warps (2 x kWarpsW x kPairs slots) in the
// place of a chunk.
inline bool warps_path(bool bf16, int g, int hd, int chunk_bytes) {
  return attend_in_registers(bf16, g, hd) && chunk_bytes == 0;
}
inline int warps_splits(int span, int max_splits, int blocks, int sms) {
  return attend_splits(span, 2 * kWarpsW * kPairs, max_splits, blocks, sms);
}

template <typename TB, int G>
cudaError_t launch_attend_warps(const void* q, const void* k, const void* v, const void* bias, int64_t bias_s0,
                                int64_t bias_s1, void* out, float* partial, int B, int nkv, int span,
                                int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                const int64_t* last_slot, int* blocks_per_sm, const QkvSource& src,
                                cudaStream_t stream) {
  if (blocks_per_sm)
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, attend_warps_kernel<TB, G>, kWarpsW * 32, 0);
  const int splits = warps_splits(span, max_splits, B * nkv, multiprocessors());
  const int split_len = (span + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(B * nkv), static_cast<unsigned>(splits)), block(kWarpsW * 32);
  // (The caches are written only when src.qkv is set, by launch_attend_qkv's callers.)
  attend_warps_kernel<TB, G><<<grid, block, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(q), static_cast<__nv_bfloat16*>(const_cast<void*>(k)),
      static_cast<__nv_bfloat16*>(const_cast<void*>(v)), static_cast<const TB*>(bias), bias_s0, bias_s1,
      static_cast<__nv_bfloat16*>(out), partial, nkv, span, split_len, cache_row, cache_head, scale, last_slot, src);
  if (splits > 1)
    attend_combine_kernel<__nv_bfloat16><<<B * nkv, 128, 0, stream>>>(partial, static_cast<__nv_bfloat16*>(out), G,
                                                                      kWarpHd, splits);
  return cudaGetLastError();
}

template <typename TB>
cudaError_t launch_attend_warps_g(int g, const void* q, const void* k, const void* v, const void* bias,
                                  int64_t bias_s0, int64_t bias_s1, void* out, float* partial, int B, int nkv,
                                  int span, int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                  const int64_t* last_slot, int* blocks_per_sm, cudaStream_t stream,
                                  const QkvSource& src = QkvSource()) {
#define QUARTET_ATTEND_WARPS(G)                                                                                 \
  launch_attend_warps<TB, G>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row, cache_head, \
                             scale, max_splits, last_slot, blocks_per_sm, src, stream)
  if (g == 1) return QUARTET_ATTEND_WARPS(1);
  if (g == 2) return QUARTET_ATTEND_WARPS(2);
  if (g == 4) return QUARTET_ATTEND_WARPS(4);
  return QUARTET_ATTEND_WARPS(8);
#undef QUARTET_ATTEND_WARPS
}

template <typename T, typename TB, int DPL>
cudaError_t launch_attend(const void* q, const void* k, const void* v, const void* bias, int64_t bias_s0,
                          int64_t bias_s1, void* out, float* partial, int B, int nkv, int g, int hd, int span,
                          int64_t cache_row, int64_t cache_head, float scale, int max_splits, int chunk_bytes,
                          const int64_t* last_slot, int* blocks_per_sm, cudaStream_t stream) {
  const int chunk = attend_chunk(hd, sizeof(T), chunk_bytes);
  const int splits = attend_splits(span, chunk, max_splits, B * nkv, multiprocessors());
  const int split_len = (span + splits - 1) / splits;
  const size_t kv_bytes = 4 * static_cast<size_t>(chunk) * hd * sizeof(T);
  const size_t bias_bytes = 2 * static_cast<size_t>(g) * chunk * sizeof(TB);
  const size_t shared = (kv_bytes + 15) / 16 * 16 + (bias_bytes + 15) / 16 * 16 +
                        sizeof(float) * (static_cast<size_t>(g) * hd + static_cast<size_t>(g) * chunk +
                                         3 * kMaxGroup + static_cast<size_t>(kAttnWarps) * hd);
  constexpr int kVec = 16 / sizeof(T);
  const dim3 grid(static_cast<unsigned>(B * nkv), static_cast<unsigned>(splits)), block(kAttnWarps * 32);
  // Each block takes a few tens of KB of shared memory; left to itself the driver may size the
  // shared part of L1 for one or two such blocks per SM, and the copies then wait in line.
  if (shared > 48 * 1024) {  // beyond the default limit a kernel must ask for it
    const cudaError_t e = hd % (8 * kVec) == 0
                              ? cudaFuncSetAttribute(attend_decode_kernel<T, TB, DPL, kVec>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared))
                              : cudaFuncSetAttribute(attend_decode_kernel<T, TB, DPL, 1>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (e != cudaSuccess) return e;
  }
  static const bool carveout = [] {
    cudaFuncSetAttribute(attend_decode_kernel<T, TB, DPL, kVec>, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
    cudaFuncSetAttribute(attend_decode_kernel<T, TB, DPL, 1>, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
    return true;
  }();
  (void)carveout;
  if (blocks_per_sm) {  // a diagnostic: how many blocks of this launch one SM holds at once
    return hd % (8 * kVec) == 0
               ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, attend_decode_kernel<T, TB, DPL, kVec>,
                                                               kAttnWarps * 32, shared)
               : cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, attend_decode_kernel<T, TB, DPL, 1>,
                                                               kAttnWarps * 32, shared);
  }
  // 16-byte loads of keys need hd to be a multiple of 8 such loads.
  if (hd % (8 * kVec) == 0)
    attend_decode_kernel<T, TB, DPL, kVec><<<grid, block, shared, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const TB*>(bias),
        bias_s0, bias_s1, static_cast<T*>(out), partial, nkv, g, hd, span, chunk, split_len, cache_row, cache_head,
        scale, last_slot);
  else
    attend_decode_kernel<T, TB, DPL, 1><<<grid, block, shared, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const TB*>(bias),
        bias_s0, bias_s1, static_cast<T*>(out), partial, nkv, g, hd, span, chunk, split_len, cache_row, cache_head,
        scale, last_slot);
  if (splits > 1)
    attend_combine_kernel<T><<<B * nkv, 128, 0, stream>>>(partial, static_cast<T*>(out), g, hd, splits);
  return cudaGetLastError();
}

template <typename T, typename TB>
cudaError_t launch_attend_dpl(const void* q, const void* k, const void* v, const void* bias, int64_t bias_s0,
                              int64_t bias_s1, void* out, float* partial, int B, int nkv, int g, int hd, int span,
                              int64_t cache_row, int64_t cache_head, float scale, int max_splits, int chunk_bytes,
                              const int64_t* last_slot, int* blocks_per_sm, cudaStream_t stream) {
#define QUARTET_ATTEND(D)                                                                                         \
  launch_attend<T, TB, D>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, g, hd, span, cache_row, cache_head, \
                          scale, max_splits, chunk_bytes, last_slot, blocks_per_sm, stream)
  if (hd <= 32) return QUARTET_ATTEND(1);
  if (hd <= 64) return QUARTET_ATTEND(2);
  if (hd <= 128) return QUARTET_ATTEND(4);
  return QUARTET_ATTEND(8);
#undef QUARTET_ATTEND
}

}  // namespace

int attend_partial_floats(bool bf16, int B, int nkv, int g, int hd, int span, int max_splits, int chunk_bytes) {
  // Enough for either kernel (the launch picks one by alignment too).
  int splits = attend_splits(span, attend_chunk(hd, bf16 ? 2 : 4, chunk_bytes), max_splits, B * nkv, multiprocessors());
  if (warps_path(bf16, g, hd, chunk_bytes))
    splits = max(splits, warps_splits(span, max_splits, B * nkv, multiprocessors()));
  return splits > 1 ? B * nkv * splits * g * (hd + 2) : 0;
}

// blocks_per_sm non-null: launches nothing, reports the occupancy instead.
cudaError_t launch_attend_decode(bool bf16, bool bias_f32, const void* q, const void* k, const void* v,
                                 const void* bias, int64_t bias_s0, int64_t bias_s1, void* out, float* partial, int B,
                                 int nkv, int g, int hd, int span, int64_t cache_row, int64_t cache_head, float scale,
                                 int max_splits, int chunk_bytes, const int64_t* last_slot, int* blocks_per_sm,
                                 cudaStream_t stream) {
  if (g > kMaxGroup || hd > 256) return cudaErrorInvalidValue;
  // Heads of 128 in bfloat16 (16-byte aligned rows) take the register kernel, unless a chunk
  // size asks for the shared-memory one (benchmarks compare the two).
  const bool aligned = aligned16(q) && aligned16(k) && aligned16(v) && cache_row % 8 == 0 && cache_head % 8 == 0;
  if (warps_path(bf16, g, hd, chunk_bytes) && aligned) {
    if (bias_f32)
      return launch_attend_warps_g<float>(g, q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row,
                                          cache_head, scale, max_splits, last_slot, blocks_per_sm, stream);
    return launch_attend_warps_g<__nv_bfloat16>(g, q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span,
                                                cache_row, cache_head, scale, max_splits, last_slot, blocks_per_sm,
                                                stream);
  }
  if (!bf16)
    return launch_attend_dpl<float, float>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, g, hd, span,
                                           cache_row, cache_head, scale, max_splits, chunk_bytes, last_slot,
                                           blocks_per_sm, stream);
  if (bias_f32)
    return launch_attend_dpl<__nv_bfloat16, float>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, g, hd, span,
                                                   cache_row, cache_head, scale, max_splits, chunk_bytes,
                                                   last_slot, blocks_per_sm, stream);
  return launch_attend_dpl<__nv_bfloat16, __nv_bfloat16>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, g, hd,
                                                         span, cache_row, cache_head, scale, max_splits, chunk_bytes,
                                                         last_slot, blocks_per_sm, stream);
}

// qkv_to_cache and attend_decode's register kernel in one launch (QkvSource): bfloat16 heads of
// 128, g of 1, 2, 4 or 8, 16-byte aligned; else cudaErrorInvalidValue (the caller checks first).
cudaError_t launch_attend_qkv(bool bias_f32, const void* qkv, const void* cos, const void* sin_signed,
                              const int64_t* slot, void* k, void* v, const void* bias, int64_t bias_s0,
                              int64_t bias_s1, void* out, float* partial, int B, int nh, int nkv, int span,
                              int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                              cudaStream_t stream) {
  const int g = nkv > 0 ? nh / nkv : 0;
  if (!attend_in_registers(true, g, kWarpHd) || g * nkv != nh || !aligned16(qkv) || !aligned16(k) || !aligned16(v) ||
      cache_row % 8 != 0 || cache_head % 8 != 0)
    return cudaErrorInvalidValue;
  QkvSource src;
  src.qkv = static_cast<const __nv_bfloat16*>(qkv);
  src.cos = static_cast<const __nv_bfloat16*>(cos);
  src.sin_signed = static_cast<const __nv_bfloat16*>(sin_signed);
  src.slot = slot;
  src.nh = nh;
  // The step's slot is also the last one read (slots after it are not written yet).
  if (bias_f32)
    return launch_attend_warps_g<float>(g, qkv, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row,
                                        cache_head, scale, max_splits, slot, nullptr, stream, src);
  return launch_attend_warps_g<__nv_bfloat16>(g, qkv, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span,
                                              cache_row, cache_head, scale, max_splits, slot, nullptr, stream, src);
}

}  // namespace kernels
}  // namespace quartet
