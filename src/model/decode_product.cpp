#include "quartet/model/decode_product.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

#ifdef QUARTET_WITH_DECODE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
int decode_product_max_rows();
int decode_product_splits(int N, int K);
bool decode_product_device_ok();
cudaError_t launch_decode_product(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, int M,
                                  int N, int K, int splits, cudaStream_t stream);
}  // namespace quartet::kernels
#endif

namespace quartet {

namespace {
#ifdef QUARTET_WITH_DECODE_KERNELS
constexpr bool kCompiledIn = true;
#else
constexpr bool kCompiledIn = false;
#endif
KernelSwitch g_switch(kCompiledIn, "QUARTET_DECODE_PRODUCT", "set_decode_product");
std::atomic<int64_t> g_launches{0};

[[maybe_unused]] bool aligned16(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// out [M, N] bfloat16 on x's device, unit stride along N, rows 16-byte aligned.
[[maybe_unused]] bool out_ok(const torch::Tensor& out, const torch::Tensor& x, int64_t M, int64_t N) {
  return out.device() == x.device() && out.scalar_type() == torch::kBFloat16 && out.dim() == 2 && out.size(0) == M &&
         out.size(1) == N && out.stride(1) == 1 && out.stride(0) >= N && out.stride(0) % 8 == 0 && aligned16(out);
}
}  // namespace

bool decode_product_enabled() { return g_switch.on(); }
int64_t decode_product_launches() { return g_launches.load(); }
void set_decode_product(bool on) { g_switch.set(on); }

bool decode_product_supports(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& out) {
#ifdef QUARTET_WITH_DECODE_KERNELS
  if (!x.defined() || !w.defined() || !x.is_cuda() || x.device() != w.device()) return false;
  if (x.scalar_type() != torch::kBFloat16 || w.scalar_type() != torch::kBFloat16) return false;
  if (x.dim() < 1 || w.dim() != 2 || !x.is_contiguous() || w.stride(1) != 1) return false;
  const int64_t K = x.size(-1), N = w.size(0);
  if (K == 0 || w.size(1) != K || K % 8 != 0 || w.stride(0) % 8 != 0 || N < 1 || N > (int64_t{1} << 30)) return false;
  const int64_t M = x.numel() / K;
  if (M < 1 || M > kernels::decode_product_max_rows()) return false;
  if (!aligned16(x) || !aligned16(w) || (out.defined() && !out_ok(out, x, M, N))) return false;
  const c10::cuda::CUDAGuard guard(x.device());
  return kernels::decode_product_device_ok();
#else
  (void)x, (void)w;
  return false;
#endif
}

int decode_product_splits(int64_t N, int64_t K) {
#ifdef QUARTET_WITH_DECODE_KERNELS
  return kernels::decode_product_splits(static_cast<int>(N), static_cast<int>(K));
#else
  (void)N, (void)K;
  return 0;
#endif
}

torch::Tensor decode_product(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& out, int splits) {
#ifdef QUARTET_WITH_DECODE_KERNELS
  QUARTET_CHECK(decode_product_supports(x, w),
                "decode_product: needs bfloat16 x [.., K] (1 to 64 rows, "
                "contiguous) and w [N, K] (unit stride "
                "along K) on one CUDA device of compute capability 9.0, "
                "K a multiple of 8, 16-byte aligned");
  QUARTET_CHECK(splits >= 0 && splits <= 8, "decode_product: splits must be 0 (chosen) to 8");
  const int64_t K = x.size(-1), N = w.size(0), M = x.numel() / K;
  torch::Tensor result = out;
  if (result.defined()) {
    QUARTET_CHECK(out_ok(result, x, M, N),
                  "decode_product: out must be bfloat16 [M, N] on x's device, "
                  "unit stride along N, rows 16-byte "
                  "aligned");
  } else {
    result = torch::empty({M, N}, x.options());
  }
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = kernels::launch_decode_product(
      x.data_ptr(), K, w.data_ptr(), w.stride(0), result.data_ptr(), result.stride(0), static_cast<int>(M),
      static_cast<int>(N), static_cast<int>(K), splits, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("decode_product: kernel launch failed: ") + cudaGetErrorString(err));
  g_launches += 1;
  if (out.defined()) return out;
  auto shape = x.sizes().vec();
  shape.back() = N;
  return result.view(shape);
#else
  (void)x, (void)w, (void)out, (void)splits;
  QUARTET_CHECK(false,
                "decode_product: this build has no device kernels "
                "(CMake found no CUDA compiler)");
  return {};
#endif
}

}  // namespace quartet
