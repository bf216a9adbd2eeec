// One decoding step's attention (model/decode_kernels.hpp attend_decode, attend_decode_qkv):
// bfloat16 heads of 128 with 1, 2, 4 or 8 query heads per KV head, in registers, the span split
// over blocks (flash decoding) where rows x KV heads leave the GPU idle, and the splits merged.
// Plain CUDA, no LibTorch headers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

constexpr int kMaxSplits = 64;

// Splits of the span over blocks (flash decoding): enough blocks to fill the GPU twice over
// when rows x KV heads do not, each split keeping two rounds of `chunk` slots or more.
// max_splits > 0 sets them instead (benchmarks compare).
inline int attend_splits(int span, int chunk, int max_splits, int blocks, int sms) {
  const int chunks = (span + chunk - 1) / chunk;
  if (max_splits > 0) return max(1, min(max_splits, chunks));
  const int want = (2 * sms + blocks - 1) / max(blocks, 1);
  return max(1, min(min(want, kMaxSplits), (chunks + 1) / 2));
}

// The splits of attend_warps_kernel merged: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
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
      out[(static_cast<int64_t>(bk) * g + j) * hd + d] = store<T>(L > 0.f ? acc / L : 0.f);  // L = 0: an idle paged row
    }
  }
}

// Decode attention for bfloat16 heads of 128 with G query heads per KV head, in registers: no
// shared-memory staging and no barrier until the end. Block (row * nkv + kv, split) has kWarpsW
// warps; a warp reads two slots per load instruction (a half-warp per slot, 16 bytes a lane:
// 512 contiguous bytes of keys, and as many of values) and keeps kPairs such pairs in flight.
// Each half-warp keeps its own online softmax (maximum, total, 8 output dimensions a lane) over
// its slots; the halves, then the warps, merge at the end (out = sum_w acc_w e^(m_w - M) /
// sum_w l_w e^(m_w - M)). Scores and probabilities in float32, the output rounded once.
// Replaces baddbmm + softmax + bmm (which round scores and probabilities to bfloat16).
constexpr int kWarpsW = 4;
constexpr int kPairs = 4;
constexpr int kWarpHd = 128;

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

// attend_warps_kernel over a paged cache (table non-null): the pool [blocks, block_size, nkv, hd]
// in the place of k_cache and v_cache, each row's slots through its block table, the row's
// context (its visible slots, the step's at context - 1; 0: an idle row, which reads and writes
// nothing and gets zeros) in the place of the bias and last_slot, and a sliding window (0: none)
// over the last `window` of them.
struct PagedRows {
  const int32_t* table = nullptr;  // [rows, table_ld]
  int64_t table_ld = 0;
  int block_size = 0;
  const int64_t* context = nullptr;  // [rows]
  int window = 0;
};

template <typename TB, int G>
__global__ void __launch_bounds__(kWarpsW * 32)
    attend_warps_kernel(const __nv_bfloat16* __restrict__ q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                        const TB* __restrict__ bias, int64_t bias_s0, int64_t bias_s1,
                        __nv_bfloat16* __restrict__ out, float* __restrict__ partial, int nkv, int span,
                        int split_len, int64_t cache_row, int64_t cache_head, float scale,
                        const int64_t* __restrict__ last_slot, QkvSource src, PagedRows paged) {
  constexpr int hd = kWarpHd;
  __shared__ float merged[kWarpsW][G][hd + 2];  // each warp's acc, then m and l
  const int bk = blockIdx.x, b = bk / nkv, kv = bk % nkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane / 16, hl = lane % 16;
  // Slots after *last_slot hold nothing yet (masked): not read. A split past it reads none and
  // leaves a maximum of -inf, which the combining kernel skips. Each slot read keeps its warp and
  // half, so what is read is summed in the same order: the same bits as reading the whole span.
  const bool is_paged = paged.table != nullptr;
  const int live = is_paged    ? static_cast<int>(paged.context[b])
                   : last_slot ? min(span, static_cast<int>(*last_slot) + 1)
                               : span;
  const int split = blockIdx.y, s_begin = split * split_len, s_end = min(live, s_begin + split_len);
  // A paged row's slots from its first visible one (the window's), in the same splits.
  const int s_from = is_paged && paged.window > 0 ? max(s_begin, live - paged.window) : s_begin;
  const int32_t* row_blocks = is_paged ? paged.table + b * paged.table_ld : nullptr;
  const int64_t slot_stride = is_paged ? static_cast<int64_t>(nkv) * hd : hd;  // elements from a slot to the next
  // Element offset of slot t's head (before the lane's 8) from kp / vp.
  auto slot_at = [&](int t) -> int64_t {
    if (!is_paged) return static_cast<int64_t>(t) * hd;
    return (static_cast<int64_t>(row_blocks[t / paged.block_size]) * paged.block_size + t % paged.block_size) *
           slot_stride;
  };
  const int64_t head_base = is_paged ? static_cast<int64_t>(kv) * hd : b * cache_row + kv * cache_head;
  const __nv_bfloat16* kp = k_cache + head_base + hl * 8;
  const __nv_bfloat16* vp = v_cache + head_base + hl * 8;
  const TB* bp = is_paged ? nullptr : bias + bk * bias_s0;
  const __nv_bfloat16* row = nullptr;  // fused: this row's q/k/v product
  if (src.qkv) {
    row = src.qkv + static_cast<int64_t>(b) * (src.nh + 2 * nkv) * hd;
    const int64_t slot = is_paged ? live - 1 : *src.slot;
    if (slot >= 0 && min(static_cast<int>(slot / split_len), static_cast<int>(gridDim.y) - 1) == split) {
      // One thread per element (the block's 128 threads, hd = 128): the step's key and value.
      const int j = threadIdx.x;
      const int64_t at = head_base + slot_at(static_cast<int>(slot)) + j;
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
  const int pairs = (s_end - s_from + 1) / 2;
  // Every lane runs the same rounds (the shuffles need the whole warp); slots past the split
  // load nothing and score -inf.
  for (int p0 = warp; p0 < pairs; p0 += kWarpsW * kPairs) {
    uint4 kr[kPairs], vr[kPairs];
    int t[kPairs];
#pragma unroll
    for (int u = 0; u < kPairs; ++u) {  // every load first: kPairs x 1 KB in flight per warp
      t[u] = s_from + 2 * (p0 + u * kWarpsW) + half;
      if (t[u] < s_end) {
        // Read at L2 (cache-global): coherent with this kernel's own writes of the step's slot.
        const int64_t at = slot_at(t[u]);
        kr[u] = __ldcg(reinterpret_cast<const uint4*>(kp + at));
        vr[u] = __ldcg(reinterpret_cast<const uint4*>(vp + at));
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
        sc[u][j] = t[u] >= s_end ? -INFINITY : bp ? d * scale + load(bp[j * bias_s1 + t[u]]) : d * scale;
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
      op[j * hd + d] = store<__nv_bfloat16>(L > 0.f ? S / L : 0.f);  // L = 0: an idle paged row
    } else {
      pp[j * (hd + 2) + d] = S;
      if (d == 0) pp[j * (hd + 2) + hd] = M, pp[j * (hd + 2) + hd + 1] = L;
    }
  }
}

// attend_warps_kernel's splits: as attend_splits chooses them, a round of the block's warps
// (2 x kWarpsW x kPairs slots) in the place of a chunk.
inline int warps_splits(int span, int max_splits, int blocks, int sms) {
  return attend_splits(span, 2 * kWarpsW * kPairs, max_splits, blocks, sms);
}

template <typename TB, int G>
cudaError_t launch_attend_warps(const void* q, const void* k, const void* v, const void* bias, int64_t bias_s0,
                                int64_t bias_s1, void* out, float* partial, int B, int nkv, int span,
                                int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                const int64_t* last_slot, const QkvSource& src, const PagedRows& paged,
                                cudaStream_t stream) {
  const int splits = warps_splits(span, max_splits, B * nkv, multiprocessors());
  const int split_len = (span + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(B * nkv), static_cast<unsigned>(splits)), block(kWarpsW * 32);
  // (The caches are written only when src.qkv is set, by launch_attend_qkv's callers.)
  attend_warps_kernel<TB, G><<<grid, block, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(q), static_cast<__nv_bfloat16*>(const_cast<void*>(k)),
      static_cast<__nv_bfloat16*>(const_cast<void*>(v)), static_cast<const TB*>(bias), bias_s0, bias_s1,
      static_cast<__nv_bfloat16*>(out), partial, nkv, span, split_len, cache_row, cache_head, scale, last_slot, src, paged);
  if (splits > 1)
    attend_combine_kernel<__nv_bfloat16><<<B * nkv, 128, 0, stream>>>(partial, static_cast<__nv_bfloat16*>(out), G,
                                                                      kWarpHd, splits);
  return cudaGetLastError();
}

template <typename TB>
cudaError_t launch_attend_warps_g(int g, const void* q, const void* k, const void* v, const void* bias,
                                  int64_t bias_s0, int64_t bias_s1, void* out, float* partial, int B, int nkv,
                                  int span, int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                  const int64_t* last_slot, cudaStream_t stream, const QkvSource& src = QkvSource(),
                                  const PagedRows& paged = PagedRows()) {
#define QUARTET_ATTEND_WARPS(G)                                                                                 \
  launch_attend_warps<TB, G>(q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row, cache_head, \
                             scale, max_splits, last_slot, src, paged, stream)
  if (g == 1) return QUARTET_ATTEND_WARPS(1);
  if (g == 2) return QUARTET_ATTEND_WARPS(2);
  if (g == 4) return QUARTET_ATTEND_WARPS(4);
  return QUARTET_ATTEND_WARPS(8);
#undef QUARTET_ATTEND_WARPS
}

// The step's fused q/k/v product as attend_warps_kernel reads it (slot: the step's, or null for
// a paged cache, whose rows each write at their own context).
QkvSource qkv_source(const void* qkv, const void* cos, const void* sin_signed, const int64_t* slot, int nh) {
  QkvSource src;
  src.qkv = static_cast<const __nv_bfloat16*>(qkv);
  src.cos = static_cast<const __nv_bfloat16*>(cos);
  src.sin_signed = static_cast<const __nv_bfloat16*>(sin_signed);
  src.slot = slot;
  src.nh = nh;
  return src;
}

// The rows and caches the register kernel reads: 16-byte aligned, every cached slot too.
bool aligned_for_warps(const void* q, const void* k, const void* v, int64_t cache_row, int64_t cache_head) {
  return aligned16(q) && aligned16(k) && aligned16(v) && cache_row % 8 == 0 && cache_head % 8 == 0;
}

}  // namespace

bool attend_in_registers(bool bf16, int g, int hd) {
  return bf16 && hd == kWarpHd && (g == 1 || g == 2 || g == 4 || g == 8);
}

int attend_partial_floats(int B, int nkv, int g, int span, int max_splits) {
  const int splits = warps_splits(span, max_splits, B * nkv, multiprocessors());
  return splits > 1 ? B * nkv * splits * g * (kWarpHd + 2) : 0;
}

cudaError_t launch_attend_decode(bool bias_f32, const void* q, const void* k, const void* v, const void* bias,
                                 int64_t bias_s0, int64_t bias_s1, void* out, float* partial, int B, int nkv, int g,
                                 int span, int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                 const int64_t* last_slot, cudaStream_t stream) {
  if (!attend_in_registers(true, g, kWarpHd) || !aligned_for_warps(q, k, v, cache_row, cache_head))
    return cudaErrorInvalidValue;
  if (bias_f32)
    return launch_attend_warps_g<float>(g, q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row,
                                        cache_head, scale, max_splits, last_slot, stream);
  return launch_attend_warps_g<__nv_bfloat16>(g, q, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span,
                                              cache_row, cache_head, scale, max_splits, last_slot, stream);
}

// qkv_to_cache and attend_decode's kernel in one launch (QkvSource).
cudaError_t launch_attend_qkv(bool bias_f32, const void* qkv, const void* cos, const void* sin_signed,
                              const int64_t* slot, void* k, void* v, const void* bias, int64_t bias_s0,
                              int64_t bias_s1, void* out, float* partial, int B, int nh, int nkv, int span,
                              int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                              cudaStream_t stream) {
  const int g = nkv > 0 ? nh / nkv : 0;
  if (!attend_in_registers(true, g, kWarpHd) || g * nkv != nh || !aligned_for_warps(qkv, k, v, cache_row, cache_head))
    return cudaErrorInvalidValue;
  const QkvSource src = qkv_source(qkv, cos, sin_signed, slot, nh);
  // The step's slot is also the last one read (slots after it are not written yet).
  if (bias_f32)
    return launch_attend_warps_g<float>(g, qkv, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span, cache_row,
                                        cache_head, scale, max_splits, slot, stream, src);
  return launch_attend_warps_g<__nv_bfloat16>(g, qkv, k, v, bias, bias_s0, bias_s1, out, partial, B, nkv, span,
                                              cache_row, cache_head, scale, max_splits, slot, stream, src);
}

cudaError_t launch_attend_paged_qkv(const void* qkv, const void* cos, const void* sin_signed, void* k_pool,
                                    void* v_pool, const int32_t* table, int64_t table_ld, int block_size,
                                    const int64_t* context, int window, void* out, float* partial, int B, int nh,
                                    int nkv, int span, float scale, int max_splits, cudaStream_t stream) {
  const int g = nkv > 0 ? nh / nkv : 0;
  if (!attend_in_registers(true, g, kWarpHd) || g * nkv != nh || !aligned_for_warps(qkv, k_pool, v_pool, 8, 8) ||
      block_size < 1)
    return cudaErrorInvalidValue;
  const QkvSource src = qkv_source(qkv, cos, sin_signed, nullptr, nh);  // a paged row's slot: its context - 1
  PagedRows paged;
  paged.table = table;
  paged.table_ld = table_ld;
  paged.block_size = block_size;
  paged.context = context;
  paged.window = window;
  // No bias (the contexts mask), no contiguous strides.
  return launch_attend_warps_g<__nv_bfloat16>(g, qkv, k_pool, v_pool, nullptr, 0, 0, out, partial, B, nkv, span, 0, 0,
                                              scale, max_splits, nullptr, stream, src, paged);
}

}  // namespace kernels
}  // namespace quartet
