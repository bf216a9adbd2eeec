// The decoding step's matrix products (model/decode_product.hpp): out [M, N] =
// x [M, K] w [N, K]^T for M <= 64 rows in bfloat16, float32 sums. At 64 rows a
// product is a stream of the weight through the multiprocessors: cuBLAS reaches
// 1.4-3.5 TB/s on the 886M model's shapes (an H200 streams 4.3), because a
// layer's small products give each multiprocessor few bytes in flight and a
// split-K product ends in a second kernel that sums the parts.
//
// Hopper's own machinery, as cuBLAS's fast kernels use it: one producer warp
// has the tensor memory accelerator (TMA) copy whole tiles, 128 weight rows x 64
// k and the 64 x rows x 64 k beside them, into a ring of shared-memory stages
// (128-byte swizzle, completion counted in bytes on an mbarrier per stage), as
// far ahead as the ring allows; one consumer warpgroup multiplies each stage
// from shared memory with wgmma (m64n64k16, the weight as A, x as B, both
// K-major) and hands the stage back. Rows of x past M and k past K arrive as
// zeros (the copy fills what lies outside the tensor).
//
// The K slices of one block of 128 weight rows form a thread-block cluster (up
// to 8 blocks): each block leaves its float32 partial tile in its shared memory,
// and after one cluster barrier each block sums a share of the tile's rows over
// the cluster's blocks, always in slice order, reading the others' shared
// memory directly. One launch, no workspace, no atomics: the same bits on every
// call for one shape and GPU.
//
// wgmma needs the architecture-specific target sm_90a; CMake builds this file
// for it alone, and the C++ side launches it only on compute capability 9.0.
#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap (the driver's function is looked up at run time: no -lcuda)
#include <cudaTypedefs.h>

#include <cstdint>
#include <mutex>

#include "core/kernel_common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QUARTET_SM90A_DEVICE 1
#endif

namespace quartet {
namespace kernels {

namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;                                 // x rows: wgmma's N
constexpr int kCols = 128;                                // weight rows a block: two m64 halves
constexpr int kChunk = 64;                                // k a stage: one 128-byte swizzled row
constexpr int kStages = 4;                                // the ring
constexpr int kWBytes = kCols * kChunk * 2;               // 16 KB
constexpr int kXBytes = kRows * kChunk * 2;               // 8 KB
constexpr int kStageBytes = kWBytes + kXBytes;            // a multiple of 1024: stages stay aligned
constexpr int kConsumers = 128;                           // one warpgroup
constexpr int kThreads = kConsumers + 32;                 // and the producer warp
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + room to align the ring to 1024 bytes
constexpr int kOutLd = kCols + 4;                         // the float32 partial tile's row, in floats
constexpr int kMaxSplits = 8;                             // the portable cluster size
static_assert(kRows * kOutLd * 4 <= kStages * kStageBytes, "the partial tile reuses the ring");

#ifdef QUARTET_SM90A_DEVICE
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// A 2-D tile (k from c0, rows from c1) of the tensor map into shared memory at dst,
// its bytes counted on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// wgmma's shared-memory matrix descriptor for a K-major tile laid out by the 128-byte
// swizzle: rows of 128 bytes, groups of 8 rows 1024 bytes apart; the start address
// moves by 32 bytes per k16 step inside the swizzled row (the base stays 1024-aligned).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  uint64_t d = static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;           // leading byte offset (unused with this swizzle)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;   // stride byte offset: 8 rows
  d |= static_cast<uint64_t>(1) << 62;           // 128-byte swizzle
  return d;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void pin(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// d [64 weight rows x 64 x rows] += A (64 x 16 of the weight) B (16 x 64 of x^T).
__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1));
}
#endif

// grid (blocks of 128 weight rows, K slices of `slice_chunks` chunks); a cluster spans the
// slices of one block of rows.
__global__ void __launch_bounds__(kThreads, 2)
    decode_product_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                          bf16* __restrict__ out, int64_t ldo, int M, int N, int total_chunks, int slice_chunks) {
#ifdef QUARTET_SM90A_DEVICE
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];   // a stage's bytes have landed
  __shared__ __align__(8) uint64_t empty_bar[kStages];  // a stage's products are done
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* ring = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const uint32_t ring_u32 = smem_u32(ring);
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kCols;
  const int c_begin = blockIdx.y * slice_chunks;
  const int chunks = max(0, min(total_chunks, c_begin + slice_chunks) - c_begin);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), kConsumers);
    }
    // The barriers' initialisation visible to the copy engine (the async proxy).
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  float acc[2][32];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[h][i] = 0.f;

  if (tid >= kConsumers) {
    if (tid == kConsumers) {  // the producer: one thread issues every copy
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
      for (int c = 0; c < chunks; ++c) {
        const int s = c % kStages;
        // A stage's second and later uses wait for its previous products.
        if (c >= kStages) mbar_wait(smem_u32(&empty_bar[s]), ((c / kStages) - 1) & 1);
        const uint32_t bar = smem_u32(&full_bar[s]);
        mbar_arrive_expect_tx(bar, kStageBytes);
        const uint32_t stage = ring_u32 + s * kStageBytes;
        const int k = (c_begin + c) * kChunk;
        tma_load_2d(stage, &w_map, k, n0, bar);
        tma_load_2d(stage + kWBytes, &x_map, k, 0, bar);
      }
    }
  } else {  // the consumers: one warpgroup
    for (int c = 0; c < chunks; ++c) {
      const int s = c % kStages;
      mbar_wait(smem_u32(&full_bar[s]), (c / kStages) & 1);
      const uint32_t stage = ring_u32 + s * kStageBytes;
      pin(acc[0]);
      pin(acc[1]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const uint64_t b = smem_desc(stage + kWBytes + kk * 32);
        wgmma_64x64x16(acc[0], smem_desc(stage + kk * 32), b);
        wgmma_64x64x16(acc[1], smem_desc(stage + kWBytes / 2 + kk * 32), b);
      }
      wgmma_commit();
      wgmma_wait_all();
      pin(acc[0]);
      pin(acc[1]);
      mbar_arrive(smem_u32(&empty_bar[s]));
    }
  }
  __syncthreads();  // every copy consumed, every product done: the ring is free

  // tile [x row][weight row of the block]: warp w of the warpgroup holds weight rows
  // 64 h + 16 w + g (+ 8) and x rows 8 j + 2 t (+ 1) in acc[h][4 j ..].
  float* tile = reinterpret_cast<float*>(ring);
  if (tid < kConsumers) {
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = h * 64 + warp * 16 + g, row = j * 8 + 2 * t;
        tile[row * kOutLd + col] = acc[h][4 * j + 0];
        tile[(row + 1) * kOutLd + col] = acc[h][4 * j + 1];
        tile[row * kOutLd + col + 8] = acc[h][4 * j + 2];
        tile[(row + 1) * kOutLd + col + 8] = acc[h][4 * j + 3];
      }
  }
  const int splits = gridDim.y;
  if (splits == 1) {
    __syncthreads();
    for (int e = tid; e < M * kCols; e += kThreads) {
      const int r = e / kCols, c = e % kCols;
      if (n0 + c < N) out[r * ldo + n0 + c] = __float2bfloat16_rn(tile[r * kOutLd + c]);
    }
    return;
  }
  // Split K: block `rank` of the cluster sums rows rank, rank + splits, ... over every
  // block's partial tile, in slice order.
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
#else
  (void)out, (void)ldo, (void)M, (void)N, (void)total_chunks, (void)slice_chunks;
#endif
}

// cuTensorMapEncodeTiled, from the driver the runtime loaded (null if it has none).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A bfloat16 matrix [rows, cols] with row stride ld (elements), read in boxes of
// box_rows x 64 columns with the 128-byte swizzle.
bool make_map(CUtensorMap* map, const void* p, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  const auto fn = encode_tiled();
  if (!fn) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kChunk), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, element_strides,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

int decode_product_max_rows() { return kRows; }

// The K splits for an N x K product on this GPU: enough blocks for two per multiprocessor
// (what fits beside each other), at most a cluster's 8, each slice at least one chunk.
int decode_product_splits(int N, int K) {
  const int tiles = (N + kCols - 1) / kCols;
  int splits = 2 * multiprocessors() / tiles;
  splits = splits < 1 ? 1 : (splits > kMaxSplits ? kMaxSplits : splits);
  const int most = (K + kChunk - 1) / kChunk;
  return splits < most ? splits : most;
}

// sm_90a code runs on compute capability 9.0 only; and the driver must offer the tensor maps.
bool decode_product_device_ok() {
  static const bool ok = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0 && encode_tiled() != nullptr;
  }();
  return ok;
}

cudaError_t launch_decode_product(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, int M,
                                  int N, int K, int splits, cudaStream_t stream) {
  if (M < 1 || M > kRows || N < 1 || K < 1 || K % 8 != 0 || ldx % 8 != 0 || ldw % 8 != 0) return cudaErrorInvalidValue;
  if (splits <= 0) splits = decode_product_splits(N, K);
  if (splits > kMaxSplits) return cudaErrorInvalidValue;
  CUtensorMap w_map, x_map;
  if (!make_map(&w_map, w, N, K, ldw, kCols) || !make_map(&x_map, x, M, K, ldx, kRows)) return cudaErrorInvalidValue;
  // Once per process and device the kernel is allowed its shared memory (above the default 48 KB).
  static std::mutex mutex;
  static bool attribute_set[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (device < 64 && !attribute_set[device]) {
      err = cudaFuncSetAttribute(decode_product_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
      if (err != cudaSuccess) return err;
      attribute_set[device] = true;
    }
  }
  // Equal slices of whole chunks; the last may be shorter (or, rarely, empty: zeros).
  const int chunks = (K + kChunk - 1) / kChunk;
  const int slice_chunks = (chunks + splits - 1) / splits;
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
  err = cudaLaunchKernelEx(&config, decode_product_kernel, w_map, x_map, static_cast<bf16*>(out), ldo, M, N, chunks,
                           slice_chunks);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet
