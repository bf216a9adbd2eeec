// Decode-shaped matrix products on one GPU: a few rows (the decoding batch) times a weight read
// once from HBM, as a decoding step runs them. For each shape it times ATen's linear (cuBLAS with
// its default heuristic: what decode_step runs today) and every algorithm cuBLASLt's heuristic
// offers for the same product (split-K sums in float32 or none), and prints the best against the
// bandwidth floor. Every timing replays a CUDA graph of the calls, as decoding does.
//   build/bench/gemm_bench [--config inputs/models/llama-886m/config.json] [--rows 64,32]
//        [--algos 32] [--calls 200]
// The weights rotate through copies that together exceed the L2 cache (50 MB on an H200), so
// no product finds its weight there, as in a decoding step that walks 16 layers.
#include <torch/cuda.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "quartet/model/model_config.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include "graph_timing.hpp"
#endif

using namespace quartet;

namespace {

constexpr double kHbmBytesPerS = 4.3e12;  // one H200, measured (developers' guide)

struct Args {
  std::string config = "inputs/models/llama-886m/config.json";
  std::vector<int64_t> rows = {64, 32};
  int algos = 32, calls = 200;
};

#ifdef QUARTET_WITH_CUDA
#define LT_CHECK(x)                                                                              \
  do {                                                                                           \
    cublasStatus_t st_ = (x);                                                                    \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #x, (int)st_); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// out [M, N] = x [M, K] W[N, K]^T in cuBLASLt's column-major terms: D [N, M] = W^T(op T) x.
struct LtProduct {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  LtProduct(int64_t M, int64_t N, int64_t K) : handle(at::cuda::getCurrentCUDABlasLtHandle()) {
    LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, M, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N));
  }
  ~LtProduct() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
  }
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(int n, size_t workspace) const {
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof(workspace)));
    // Split-K partial sums in float32 or none: not summed in place in bfloat16 (precision).
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                  sizeof(schemes)));
    std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<size_t>(n));
    int got = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, n, r.data(), &got));
    cublasLtMatmulPreferenceDestroy(pref);
    r.resize(static_cast<size_t>(got));
    return r;
  }
  void run(const cublasLtMatmulAlgo_t& algo, const void* w, const void* x, void* out, void* ws, size_t ws_bytes) {
    const float one = 1.f, zero = 0.f;
    LT_CHECK(cublasLtMatmul(handle, desc, &one, w, a, x, b, &zero, out, c, out, c, &algo, ws, ws_bytes,
                            c10::cuda::getCurrentCUDAStream().stream()));
  }
};

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, splitk = 0, stages = 0, scheme = 0;
  size_t n = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &n);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &n);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &n);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &n);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme), &n);
  std::ostringstream s;
  s << "id " << id << " tile " << tile << " splitk " << splitk << " stages " << stages << " reduction " << scheme;
  return s.str();
}
#endif

std::vector<int64_t> parse_list(const std::string& v) {
  std::vector<int64_t> r;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) r.push_back(std::stoll(item));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") a.config = v;
    else if (k == "--rows") a.rows = parse_list(v);
    else if (k == "--algos") a.algos = std::stoi(v);
    else if (k == "--calls") a.calls = std::stoi(v);
    else {
      std::fprintf(stderr, "gemm_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
#ifndef QUARTET_WITH_CUDA
  std::fprintf(stderr, "gemm_bench: this build has no CUDA\n");
  return 1;
#else
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gemm_bench: no GPU\n");
    return 1;
  }
  const ModelConfig c = ModelConfig::from_json_file(a.config);
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const std::vector<Shape> shapes = {{"qkv", q + 2 * kv, h},
                                     {"o", h, q},
                                     {"gate_up", 2 * c.intermediate_size, h},
                                     {"down", h, c.intermediate_size},
                                     {"lm_head", c.vocab_size, h}};
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const size_t ws_bytes = 32u << 20;
  auto ws = torch::empty({static_cast<int64_t>(ws_bytes)}, opts.dtype(torch::kUInt8));
  std::printf("| rows | product | N x K | weight MB | ATen us | ATen TB/s | best Lt us | best Lt TB/s | Lt candidates "
              "| best algorithm | max |diff| |\n|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n");
  double aten_sum = 0, best_sum = 0;
  for (int64_t M : a.rows) {
    for (const auto& s : shapes) {
      const double bytes = 2.0 * static_cast<double>(s.n * s.k);
      const int copies = std::max(2, static_cast<int>(256e6 / bytes) + 1);
      std::vector<torch::Tensor> w;
      for (int i = 0; i < copies; ++i) w.push_back(torch::randn({s.n, s.k}, opts) * 0.02);
      auto x = torch::randn({M, s.k}, opts);
      auto out = torch::empty({M, s.n}, opts);
      const double aten =
          bench::graph_us([&](int i) { at::linear_out(out, x, w[static_cast<size_t>(i % copies)]); }, a.calls);
      auto reference = at::linear(x, w[0]).to(torch::kFloat32);
      LtProduct lt(M, s.n, s.k);
      double best = 1e30, best_diff = 0;
      std::string best_name = "-";
      const auto cands = lt.candidates(a.algos, ws_bytes);
      for (const auto& r : cands) {
        if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > ws_bytes) continue;
        const double us = bench::graph_us(
            [&](int i) {
              lt.run(r.algo, w[static_cast<size_t>(i % copies)].data_ptr(), x.data_ptr(), out.data_ptr(),
                     ws.data_ptr(), ws_bytes);
            },
            a.calls);
        if (us < best) {
          best = us;
          best_name = describe(r.algo);
          lt.run(r.algo, w[0].data_ptr(), x.data_ptr(), out.data_ptr(), ws.data_ptr(), ws_bytes);
          best_diff = (out.to(torch::kFloat32) - reference).abs().max().item<double>();
        }
      }
      aten_sum += aten;
      best_sum += best;
      std::printf("| %ld | %s | %ld x %ld | %.1f | %.1f | %.2f | %.1f | %.2f | %zu | %s | %.2g |\n",
                  static_cast<long>(M), s.name, static_cast<long>(s.n), static_cast<long>(s.k), bytes / 1e6, aten,
                  bytes / aten / 1e6, best, bytes / best / 1e6, cands.size(), best_name.c_str(), best_diff);
    }
  }
  std::printf("\nsum over the table: ATen %.1f us, best Lt %.1f us\n", aten_sum, best_sum);
  std::printf("floor at %.1f TB/s is the weight's bytes over the time; the x rows and the output are < 1%%.\n",
              kHbmBytesPerS / 1e12);
  return 0;
#endif
}
