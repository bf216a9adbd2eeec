// The decoding step's matrix products (model/decode_product.hpp): out [M, N] =
// x [M, K] w [N, K]^T for M <= 64 rows in bfloat16, float32 sums. At 64 rows a
// product is a stream of the weight through the multiprocessors; cuBLAS
// reaches 1.4-3 TB/s on the 886M model's layers (an H200 streams 4.3), because
// a layer's small products give each multiprocessor too few bytes in flight and
// a split-K product ends in a second kernel that sums the parts.
//
// Each weight element is used by one warp only, so the weight goes from global
// memory straight into the registers of the tensor-core instruction (mma.sync
// m16n8k16, the weight as its A operand), one 16-byte load per thread and row,
// two chunks of 64 k in flight per warp; only x, which every warp of a block
// reads, is staged in shared memory (cp.async, three chunks ahead). Since k is
// summed over, a thread's 8 consecutive k may stand for any 8 of the
// instruction's k slots, as long as x's do too: thread t of a quad holds k
// 8t..8t+7 of its rows for two instructions. A block covers 128 weight rows (4
// warps of 32) and all 64 x rows over one slice of K. The K slices of one block
// of rows form a thread-block cluster (Hopper, up to 8 blocks): each block
// leaves its float32 partial tile in its shared memory, and after one cluster
// barrier each block sums a share of the tile's rows over the cluster's blocks,
// always in slice order, reading the others' shared memory directly. No
// workspace, no second kernel, and the same bits on every call (no atomics).
#include <cooperative_groups.h>

#include "core/kernel_common.cuh"

namespace quartet {
namespace kernels {

namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;           // x rows: every row of the batch (8 blocks of 8)
constexpr int kWarps = 4;           // a block's warps, 32 weight rows each
constexpr int kCols = 32 * kWarps;  // weight rows (output columns) per block
constexpr int kThreads = 32 * kWarps;
constexpr int kChunk = 64;                          // k per chunk: two k32 steps
constexpr int kXStages = 4;                         // x chunks in shared memory: 3 loading, 1 in use
constexpr int kXLd = kChunk + 32;                   // a staged x row in elements: 192 bytes, so that the
                                                    // quads' 16-byte reads of two rows hit distinct banks
constexpr int kXStage = kRows * kXLd;               // elements
constexpr int kSmemBytes = kXStages * kXStage * 2;  // 49,152
constexpr int kOutLd = kCols + 4;                   // the float32 partial tile's row, in floats
constexpr int kMaxSplits = 8;                       // the portable cluster size
static_assert(kRows * kOutLd * 4 <= kSmemBytes, "the partial tile reuses x's stages");

// 16 bytes global -> shared, asynchronously; zeros where !valid (src is then
// not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 16 bytes of the weight, read once: not kept in L1.
__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// d += a b: a 16 x 16 (bf16, row), b 16 x 8 (bf16, col), d 16 x 8 float32.
__device__ __forceinline__ void mma16816(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, "
      "%2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One chunk of this thread's weight: [k32 step][m16 block][row g, row g + 8].
struct WeightChunk {
  uint4 v[2][2][2];
};

// grid (blocks of 128 weight rows, splits of K); a cluster spans the splits of
// one block of rows.
__global__ void __launch_bounds__(kThreads, 3)
    decode_product_kernel(const bf16* __restrict__ x, int64_t ldx, const bf16* __restrict__ w, int64_t ldw,
                          bf16* __restrict__ out, int64_t ldo, int M, int N, int K, int k_slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* xs_all = reinterpret_cast<bf16*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // the quad and the thread in it (mma's
                                         // groupID, threadID_in_group)
  const int n0 = blockIdx.x * kCols;
  const int splits = gridDim.y;
  const int k_begin = blockIdx.y * k_slice;
  const int k_end = min(K, k_begin + k_slice);
  const int chunks = k_end > k_begin ? (k_end - k_begin + kChunk - 1) / kChunk : 0;

  // x's chunk c into stage `stage`: 64 rows x 64 k in 16-byte pieces (K is a
  // multiple of 8, so a piece is wholly inside or outside); rows past M and k
  // past the slice read as zeros.
  auto load_x = [&](int c, int stage) {
    bf16* xs = xs_all + stage * kXStage;
    const int k0 = k_begin + c * kChunk;
    constexpr int kPieces = kChunk / 8;
#pragma unroll
    for (int v = tid; v < kRows * kPieces; v += kThreads) {
      const int r = v / kPieces, k = (v % kPieces) * 8;
      const bool ok = r < M && k0 + k < k_end;
      cp_async16(xs + r * kXLd + k, ok ? x + r * ldx + k0 + k : x, ok);
    }
  };
  // This thread's weight pieces of chunk c: rows n0 + 32 warp + 16 mb + g (+
  // 8), k 32 s + 8 t.
  const bf16* w_rows[2][2];
  bool row_ok[2][2];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = n0 + warp * 32 + mb * 16 + h * 8 + g;
      row_ok[mb][h] = row < N;
      w_rows[mb][h] = w + static_cast<int64_t>(row_ok[mb][h] ? row : 0) * ldw;
    }
  auto load_w = [&](int c, WeightChunk& wc) {
    const int k0 = k_begin + c * kChunk;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int k = k0 + s * 32 + 8 * t;
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wc.v[s][mb][h] = (row_ok[mb][h] && k < k_end) ? load_stream(w_rows[mb][h] + k) : make_uint4(0, 0, 0, 0);
    }
  };

  float acc[2][8][4];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mb][nb][e] = 0.f;

  // Chunk c's products: for each k32 step, x's 8 blocks of 8 rows (one 16-byte
  // read each) against the weight's two m16 blocks, two instructions each (k
  // 8t..8t+3, then 8t+4..8t+7).
  auto compute = [&](int c, const WeightChunk& wc) {
    const bf16* xs = xs_all + (c % kXStages) * kXStage;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + (nb * 8 + g) * kXLd + s * 32 + 8 * t);
#pragma unroll
        for (int mb = 0; mb < 2; ++mb) {
          const uint4& lo = wc.v[s][mb][0];
          const uint4& hi = wc.v[s][mb][1];
          mma16816(acc[mb][nb], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
          mma16816(acc[mb][nb], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
        }
      }
    }
  };

#pragma unroll
  for (int st = 0; st < kXStages - 1; ++st) {
    if (st < chunks) load_x(st, st);
    cp_async_commit();
  }
  WeightChunk wa, wb;
  if (chunks > 0) load_w(0, wa);
  // Two chunks per pass, so that the two weight buffers stay in registers:
  // chunk c + 1's weight is on its way while chunk c is multiplied.
  for (int c = 0; c < chunks; c += 2) {
    if (c + 1 < chunks) load_w(c + 1, wb);
    cp_async_wait<kXStages - 2>();  // x's chunk c has landed (this thread's pieces)
    __syncthreads();                // everyone's pieces; everyone done with chunk c - 1's
                                    // stage
    if (c + kXStages - 1 < chunks) load_x(c + kXStages - 1, (c + kXStages - 1) % kXStages);
    cp_async_commit();
    compute(c, wa);
    if (c + 1 >= chunks) break;
    if (c + 2 < chunks) load_w(c + 2, wa);
    cp_async_wait<kXStages - 2>();
    __syncthreads();
    if (c + kXStages < chunks) load_x(c + kXStages, (c + kXStages) % kXStages);
    cp_async_commit();
    compute(c + 1, wb);
  }
  cp_async_wait<0>();
  __syncthreads();  // x's stages are free: the partial tile goes there

  // tile [x row][weight row of the block]: acc[mb][nb] holds (weight row 16 mb
  // + g (+ 8), x rows 8 nb + 2t, 8 nb + 2t + 1).
  float* tile = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int col = warp * 32 + mb * 16 + g, row = nb * 8 + 2 * t;
      tile[row * kOutLd + col] = acc[mb][nb][0];
      tile[(row + 1) * kOutLd + col] = acc[mb][nb][1];
      tile[row * kOutLd + col + 8] = acc[mb][nb][2];
      tile[(row + 1) * kOutLd + col + 8] = acc[mb][nb][3];
    }

  if (splits == 1) {
    __syncthreads();
    for (int e = tid; e < M * kCols; e += kThreads) {
      const int r = e / kCols, c = e % kCols;
      if (n0 + c < N) out[r * ldo + n0 + c] = __float2bfloat16_rn(tile[r * kOutLd + c]);
    }
    return;
  }
  // Split K: block `rank` of the cluster sums rows rank, rank + splits, ...
  // over every block's partial tile, in slice order.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int my_rows = rank < M ? (M - rank + splits - 1) / splits : 0;
  for (int e = tid; e < my_rows * (kCols / 4); e += kThreads) {
    const int r = rank + (e / (kCols / 4)) * splits, c = (e % (kCols / 4)) * 4;
    float* at = tile + r * kOutLd + c;
    float4 sum = *reinterpret_cast<const float4*>(cluster.map_shared_rank(at, 0));
    for (int s = 1; s < splits; ++s) {
      const float4 p = *reinterpret_cast<const float4*>(cluster.map_shared_rank(at, s));
      sum.x += p.x, sum.y += p.y, sum.z += p.z, sum.w += p.w;
    }
    const float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (n0 + c + j < N) out[r * ldo + n0 + c + j] = __float2bfloat16_rn(v[j]);
  }
  cluster.sync();  // no block leaves while another still reads its tile
#endif
}

}  // namespace

int decode_product_max_rows() { return kRows; }

// The K splits for an N x K product on this GPU: enough blocks for three per
// multiprocessor (what fits beside each other), at most a cluster's 8, each
// slice at least one chunk.
int decode_product_splits(int N, int K) {
  const int tiles = (N + kCols - 1) / kCols;
  int splits = 3 * multiprocessors() / tiles;
  splits = splits < 1 ? 1 : (splits > kMaxSplits ? kMaxSplits : splits);
  const int most = (K + kChunk - 1) / kChunk;
  return splits < most ? splits : most;
}

bool decode_product_device_ok() {
  static const bool ok = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;  // thread-block clusters
  }();
  return ok;
}

cudaError_t launch_decode_product(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, int M,
                                  int N, int K, int splits, cudaStream_t stream) {
  if (M < 1 || M > kRows || N < 1 || K < 1 || K % 8 != 0) return cudaErrorInvalidValue;
  if (splits <= 0) splits = decode_product_splits(N, K);
  if (splits > kMaxSplits) return cudaErrorInvalidValue;
  // Once per process and device the kernel is allowed its shared memory (48 KB:
  // the default limit, set anyway so that a larger kXStages needs no other
  // change).
  static bool attribute_set[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 64 && !attribute_set[device]) {
    err = cudaFuncSetAttribute(decode_product_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    attribute_set[device] = true;
  }
  // Equal slices of whole chunks; the last may be shorter (or, rarely, empty:
  // zeros).
  const int chunks = (K + kChunk - 1) / kChunk;
  const int k_slice = ((chunks + splits - 1) / splits) * kChunk;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((N + kCols - 1) / kCols), static_cast<unsigned>(splits), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.y = static_cast<unsigned>(splits);
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = splits > 1 ? 1 : 0;
  err = cudaLaunchKernelEx(&config, decode_product_kernel, static_cast<const bf16*>(x), ldx,
                           static_cast<const bf16*>(w), ldw, static_cast<bf16*>(out), ldo, M, N, K, k_slice);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
