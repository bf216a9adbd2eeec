// What bounds a decode-shaped product (64 rows x a weight streamed once) in quartet's attempted
// kernel (7e22f99, reverted): the kernel's form with its parts switched off one at a time, the
// weight's prefetch depth varied, against cuBLAS and a plain copy-speed read of the same bytes.
// Standalone (CUDA runtime and cuBLAS only), so that it builds in seconds on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/decode_product_probe.cu -lcublas -o probe && ./probe [layers]
// (layers: only the last experiment, a decoding layer's traffic with and without L2 prefetch).
// Variants: pf = weight chunks in flight per warp beyond the one in use (registers), x = x
// staged by cp.async each chunk (0: never loaded, zeros), mma = tensor-core products (0: the
// weight's words xor-folded instead, so its loads stay). Only pf*, x1, mma1 computes the product;
// its largest difference from cuBLAS is printed.
#include <cooperative_groups.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kRows = 64, kWarps = 4, kCols = 32 * kWarps, kThreads = 32 * kWarps, kChunk = 64, kXStages = 4;
constexpr int kXLd = kChunk + 32, kXStage = kRows * kXLd, kSmemBytes = kXStages * kXStage * 2, kOutLd = kCols + 4;

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void mma16816(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
struct WeightChunk {
  uint4 v[2][2][2];
};

template <int PF, bool X, bool MMA>
__global__ void __launch_bounds__(kThreads, PF == 1 ? 3 : 2)
    product_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ out, int M, int N, int K,
                   int k_slice) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* xs_all = reinterpret_cast<bf16*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kCols, splits = gridDim.y;
  const int k_begin = blockIdx.y * k_slice, k_end = min(K, k_begin + k_slice);
  const int chunks = k_end > k_begin ? (k_end - k_begin + kChunk - 1) / kChunk : 0;
  if (!X) {
    for (int i = tid; i < kXStages * kXStage / 8; i += kThreads)
      reinterpret_cast<uint4*>(xs_all)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  auto load_x = [&](int c, int stage) {
    if (!X) return;
    bf16* xs = xs_all + stage * kXStage;
    const int k0 = k_begin + c * kChunk;
#pragma unroll
    for (int v = tid; v < kRows * 8; v += kThreads) {
      const int r = v / 8, k = (v % 8) * 8;
      const bool ok = r < M && k0 + k < k_end;
      cp_async16(xs + r * kXLd + k, ok ? x + r * K + k0 + k : x, ok);
    }
  };
  const bf16* w_rows[2][2];
  bool row_ok[2][2];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = n0 + warp * 32 + mb * 16 + h * 8 + g;
      row_ok[mb][h] = row < N;
      w_rows[mb][h] = w + static_cast<int64_t>(row_ok[mb][h] ? row : 0) * K;
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
  unsigned fold = 0;
  auto compute = [&](int c, const WeightChunk& wc) {
    if (!MMA) {
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int mb = 0; mb < 2; ++mb)
#pragma unroll
          for (int h = 0; h < 2; ++h) fold ^= wc.v[s][mb][h].x ^ wc.v[s][mb][h].y ^ wc.v[s][mb][h].z ^ wc.v[s][mb][h].w;
      return;
    }
    const bf16* xs = xs_all + (c % kXStages) * kXStage;
#pragma unroll
    for (int s = 0; s < 2; ++s)
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
  };
#pragma unroll
  for (int st = 0; st < kXStages - 1; ++st) {
    if (st < chunks) load_x(st, st);
    cp_async_commit();
  }
  WeightChunk ring[PF + 1];
#pragma unroll
  for (int j = 0; j < PF; ++j)
    if (j < chunks) load_w(j, ring[j]);
  for (int c0 = 0; c0 < chunks; c0 += PF + 1) {
#pragma unroll
    for (int j = 0; j <= PF; ++j) {
      const int c = c0 + j;
      if (c < chunks) {
        if (c + PF < chunks) load_w(c + PF, ring[(j + PF) % (PF + 1)]);
        cp_async_wait<kXStages - 2>();
        __syncthreads();
        if (c + kXStages - 1 < chunks) load_x(c + kXStages - 1, (c + kXStages - 1) % kXStages);
        cp_async_commit();
        compute(c, ring[j]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  float* tile = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int col = warp * 32 + mb * 16 + g, row = nb * 8 + 2 * t;
      tile[row * kOutLd + col] = acc[mb][nb][0] + (MMA ? 0.f : __uint_as_float(fold & 1u));
      tile[(row + 1) * kOutLd + col] = acc[mb][nb][1];
      tile[row * kOutLd + col + 8] = acc[mb][nb][2];
      tile[(row + 1) * kOutLd + col + 8] = acc[mb][nb][3];
    }
  if (splits == 1) {
    __syncthreads();
    for (int e = tid; e < M * kCols; e += kThreads) {
      const int r = e / kCols, c = e % kCols;
      if (n0 + c < N) out[r * N + n0 + c] = __float2bfloat16_rn(tile[r * kOutLd + c]);
    }
    return;
  }
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
    for (int j = 0; j < 4; ++j)
      if (n0 + c + j < N) out[r * N + n0 + c + j] = __float2bfloat16_rn(v[j]);
  }
  cluster.sync();
}

// The same bytes read at copy speed: 16 bytes a thread per step, grid-stride, four in flight.
__global__ void read_all(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned f = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    f ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n; i += stride) f ^= p[i].x;
  if (f == 0x12345678u) *sink = f;
}

// Asks L2 to fetch [p, p + bytes) ahead of its use (Hopper's bulk prefetch), 4 KB a thread.
__global__ void prefetch_l2(const char* p, size_t bytes) {
  const size_t piece = 4096;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * piece; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * piece) {
    const unsigned n = static_cast<unsigned>(bytes - i < piece ? bytes - i : piece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p + i), "r"(n & ~15u) : "memory");
  }
}

template <int PF, bool X, bool MMA>
void launch(const bf16* x, const bf16* w, bf16* out, int M, int N, int K, int splits, cudaStream_t st) {
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(product_kernel<PF, X, MMA>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    set = true;
  }
  const int chunks = (K + kChunk - 1) / kChunk, k_slice = ((chunks + splits - 1) / splits) * kChunk;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((N + kCols - 1) / kCols, splits, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = splits;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = splits > 1 ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, product_kernel<PF, X, MMA>, x, w, out, M, N, K, k_slice));
}

}  // namespace

int main(int argc, char** argv) {
  const bool layers_only = argc > 1 && std::string(argv[1]) == "layers";
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasHandle_t h;
  cublasCreate(&h);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasSetStream(h, st);
  struct Shape {
    const char* name;
    int n, k;
  };
  const Shape shapes[] = {
      {"qkv", 4096, 2048}, {"o", 2048, 2048}, {"gate_up", 11264, 2048}, {"down", 2048, 5632}, {"lm_head", 32000, 2048}};
  const int M = 64, reps = 100;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  std::printf("64 rows, bf16; us per product (weights rotating through copies > 256 MB); TB/s of the weight\n");
  std::printf(
      "| product | splits | cuBLAS | cuBLAS, weight in L2 | read_all | pf1 x1 mma1 | pf1 x0 mma1 | pf1 x1 mma0 | pf1 "
      "x0 mma0 | pf2 x1 mma1 "
      "| pf2 x0 mma0 | pf3 x1 mma1 | pf3 x0 mma0 | max diff "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    if (layers_only) break;
    const size_t wn = static_cast<size_t>(s.n) * s.k, bytes = wn * 2;
    const int copies = static_cast<int>(256e6 / bytes) + 2;
    bf16 *x, *out, *ref;
    std::vector<bf16*> w(copies);
    CK(cudaMalloc(&x, static_cast<size_t>(M) * s.k * 2));
    CK(cudaMalloc(&out, static_cast<size_t>(M) * s.n * 2));
    CK(cudaMalloc(&ref, static_cast<size_t>(M) * s.n * 2));
    std::vector<bf16> host(wn);
    srand(1);
    for (size_t i = 0; i < wn; ++i) host[i] = __float2bfloat16((rand() / (float)RAND_MAX - 0.5f) * 0.1f);
    for (auto& p : w) {
      CK(cudaMalloc(&p, bytes));
      CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    std::vector<bf16> hx(static_cast<size_t>(M) * s.k);
    for (auto& v : hx) v = __float2bfloat16(rand() / (float)RAND_MAX - 0.5f);
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    auto time = [&](auto&& f) {
      for (int i = 0; i < 5; ++i) f(i);
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < reps; ++i) f(i);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      return ms * 1e3 / reps;
    };
    const float one = 1.f, zero = 0.f;
    auto cublas = [&](int i, bf16* o) {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, M, s.k, &one, w[i % copies], CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k,
                   &zero, o, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    const double t_cublas = time([&](int i) { cublas(i, ref); });
    const double t_hot = time([&](int) { cublas(0, ref); });  // one weight: in L2 where it fits (50 MB)
    const double t_read = time([&](int i) {
      read_all<<<4 * sms, 512, 0, st>>>(reinterpret_cast<const uint4*>(w[i % copies]), bytes / 16, sink);
    });
    const int tiles = (s.n + kCols - 1) / kCols;
    for (int splits : {1, 2, 4, 8}) {
      if (splits > 1 && tiles * splits > 8 * sms) continue;
      double t[8];
      t[0] = time([&](int i) { launch<1, true, true>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[1] = time([&](int i) { launch<1, false, true>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[2] = time([&](int i) { launch<1, true, false>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[3] = time([&](int i) { launch<1, false, false>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[4] = time([&](int i) { launch<2, true, true>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[5] = time([&](int i) { launch<2, false, false>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[6] = time([&](int i) { launch<3, true, true>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      t[7] = time([&](int i) { launch<3, false, false>(x, w[i % copies], out, M, s.n, s.k, splits, st); });
      launch<3, true, true>(x, w[0], out, M, s.n, s.k, splits, st);
      cublas(0, ref);
      CK(cudaStreamSynchronize(st));
      std::vector<bf16> a(static_cast<size_t>(M) * s.n), b(a.size());
      CK(cudaMemcpy(a.data(), out, a.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), ref, b.size() * 2, cudaMemcpyDeviceToHost));
      double diff = 0;
      for (size_t i = 0; i < a.size(); ++i)
        diff = std::max(diff, (double)std::abs(__bfloat162float(a[i]) - __bfloat162float(b[i])));
      std::printf("| %s | %d | %.1f (%.2f) | %.1f | %.1f (%.2f) |", s.name, splits, t_cublas, bytes / t_cublas / 1e6,
                  t_hot, t_read, bytes / t_read / 1e6);
      for (double v : t) std::printf(" %.1f (%.2f) |", v, bytes / v / 1e6);
      std::printf(" %.3g |\n", diff);
    }
    for (auto p : w) cudaFree(p);
    cudaFree(x), cudaFree(out), cudaFree(ref);
  }
  // A decoding layer's memory traffic as a CUDA graph of 16 layers: a stand-in for attention
  // (the KV cache's 50 MB read by a quarter of the GPU's blocks, about attention's 2.4 TB/s),
  // then cuBLAS's o, gate_up and down products at 64 rows. With prefetch: a side branch asks L2
  // for o's and down's weights while the KV cache is read. Microseconds a layer.
  {
    const int L = 16, K = 2048, I = 5632;
    const size_t kv_bytes = 50u << 20;
    std::vector<char*> kv(L);
    std::vector<bf16*> wo(L), wgu(L), wd(L);
    for (int l = 0; l < L; ++l) {
      CK(cudaMalloc(&kv[l], kv_bytes));
      CK(cudaMalloc(&wo[l], size_t(K) * K * 2));
      CK(cudaMalloc(&wgu[l], size_t(2 * I) * K * 2));
      CK(cudaMalloc(&wd[l], size_t(K) * I * 2));
      CK(cudaMemset(kv[l], 0, kv_bytes));
      CK(cudaMemset(wo[l], 0, size_t(K) * K * 2));
      CK(cudaMemset(wgu[l], 0, size_t(2 * I) * K * 2));
      CK(cudaMemset(wd[l], 0, size_t(K) * I * 2));
    }
    bf16 *xa, *xo, *xgu, *xd;
    CK(cudaMalloc(&xa, size_t(M) * K * 2));
    CK(cudaMalloc(&xo, size_t(M) * K * 2));
    CK(cudaMalloc(&xgu, size_t(M) * 2 * I * 2));
    CK(cudaMalloc(&xd, size_t(M) * K * 2));
    CK(cudaMemset(xa, 0, size_t(M) * K * 2));
    CK(cudaMemset(xgu, 0, size_t(M) * 2 * I * 2));
    cudaStream_t side;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const float one = 1.f, zero = 0.f;
    auto gemm = [&](const bf16* w, const bf16* x, bf16* o, int n, int k) {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, M, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero, o,
                   CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    // What layer(l) enqueues for each of the L layers, captured as one graph: us a layer over 20
    // replays after 3.
    auto graph_us_per_layer = [&](auto&& layer) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int l = 0; l < L; ++l) layer(l);
      CK(cudaStreamEndCapture(st, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, st));
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(exec, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
      return ms * 1e3 / 20 / L;
    };
    for (int i = 0; i < 3; ++i) gemm(wo[0], xa, xo, K, K);  // cuBLAS's workspace, outside capture
    CK(cudaStreamSynchronize(st));
    const char* modes[] = {"no prefetch", "o's weight prefetched", "o's and down's weights prefetched"};
    for (int mode = 0; mode < 3; ++mode) {
      const double us = graph_us_per_layer([&](int l) {
        if (mode > 0) {  // a side branch: L2 prefetch of o's (and down's) weight during the KV read
          CK(cudaEventRecord(fork, st));
          CK(cudaStreamWaitEvent(side, fork));
          prefetch_l2<<<sms, 128, 0, side>>>(reinterpret_cast<const char*>(wo[l]), size_t(K) * K * 2);
          if (mode > 1) prefetch_l2<<<sms, 128, 0, side>>>(reinterpret_cast<const char*>(wd[l]), size_t(K) * I * 2);
          CK(cudaEventRecord(join, side));
        }
        read_all<<<sms / 4, 512, 0, st>>>(reinterpret_cast<const uint4*>(kv[l]), kv_bytes / 16, sink);
        if (mode > 0) CK(cudaStreamWaitEvent(st, join));
        gemm(wo[l], xa, xo, K, K);
        gemm(wgu[l], xo, xgu, 2 * I, K);
        gemm(wd[l], xgu, xd, K, I);
      });
      std::printf("layer stand-in (KV read, o, gate_up, down), %s: %.1f us a layer\n", modes[mode], us);
    }
    // The parts alone, for scale.
    const char* names[] = {"KV read stand-in", "o", "gate_up", "down"};
    for (int part = 0; part < 4; ++part) {
      const double us = graph_us_per_layer([&](int l) {
        if (part == 0) read_all<<<sms / 4, 512, 0, st>>>(reinterpret_cast<const uint4*>(kv[l]), kv_bytes / 16, sink);
        if (part == 1) gemm(wo[l], xa, xo, K, K);
        if (part == 2) gemm(wgu[l], xo, xgu, 2 * I, K);
        if (part == 3) gemm(wd[l], xgu, xd, K, I);
      });
      std::printf("  %s alone (graph, cold): %.1f us a layer\n", names[part], us);
    }
  }
  return 0;
}
