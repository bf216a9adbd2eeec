#include "quartet/model/decode_kernels.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "quartet/core/check.hpp"

#ifdef QUARTET_WITH_DECODE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace quartet::kernels {
cudaError_t launch_qkv_to_cache(bool bf16, const void* qkv, const void* cos, const void* sin_signed,
                                const int64_t* slot, void* q_out, void* k_cache, void* v_cache, int B, int nh, int nkv,
                                int hd, int64_t cache_row, int64_t cache_head, bool rotate, cudaStream_t stream);
}
#endif

namespace quartet {

namespace {
bool initially_enabled() {
#ifdef QUARTET_WITH_DECODE_KERNELS
  const char* v = std::getenv("QUARTET_DECODE_KERNELS");
  return !(v && std::strcmp(v, "0") == 0);
#else
  return false;
#endif
}
bool g_enabled = initially_enabled();
}  // namespace

bool decode_kernels_enabled() { return g_enabled; }

void set_decode_kernels(bool on) {
#ifdef QUARTET_WITH_DECODE_KERNELS
  g_enabled = on;
#else
  QUARTET_CHECK(!on, "set_decode_kernels: this build has no device kernels (CMake found no CUDA compiler)");
  g_enabled = false;
#endif
}

void qkv_to_cache(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                  const torch::Tensor& slot, const torch::Tensor& q_out, const torch::Tensor& k_cache,
                  const torch::Tensor& v_cache, int64_t nh, int64_t nkv, int64_t hd) {
#ifdef QUARTET_WITH_DECODE_KERNELS
  const int64_t B = qkv.size(0);
  const auto dtype = qkv.scalar_type();
  const bool rotate = cos.defined();
  QUARTET_CHECK(qkv.is_cuda() && qkv.dim() == 2 && qkv.size(1) == (nh + 2 * nkv) * hd && qkv.is_contiguous() &&
                    (dtype == torch::kFloat32 || dtype == torch::kBFloat16),
                "qkv_to_cache: qkv must be a contiguous float32 or bfloat16 CUDA tensor [B, (nh + 2 nkv) hd]");
  auto same = [&](const torch::Tensor& t) {
    return t.device() == qkv.device() && t.scalar_type() == dtype && t.is_contiguous();
  };
  if (rotate)
    QUARTET_CHECK(same(cos) && same(sin_signed) && cos.numel() == B * hd && sin_signed.numel() == B * hd && hd % 2 == 0,
                  "qkv_to_cache: cos and sin_signed must be [B, hd] like qkv");
  QUARTET_CHECK(same(q_out) && q_out.numel() == B * nh * hd, "qkv_to_cache: q_out must be [B, nh, hd] like qkv");
  for (const auto* c : {&k_cache, &v_cache})
    QUARTET_CHECK(same(*c) && c->dim() == 4 && c->size(0) >= B && c->size(1) == nkv && c->size(3) == hd,
                  "qkv_to_cache: the caches must be contiguous [rows >= B, nkv, max_len, hd] like qkv");
  QUARTET_CHECK(k_cache.sizes() == v_cache.sizes(), "qkv_to_cache: the key and value caches differ in shape");
  QUARTET_CHECK(slot.device() == qkv.device() && slot.scalar_type() == torch::kLong && slot.numel() == 1,
                "qkv_to_cache: slot must be one int64 on the device");
  const c10::cuda::CUDAGuard guard(qkv.device());
  const cudaError_t err = kernels::launch_qkv_to_cache(
      dtype == torch::kBFloat16, qkv.data_ptr(), rotate ? cos.data_ptr() : nullptr,
      rotate ? sin_signed.data_ptr() : nullptr, slot.data_ptr<int64_t>(), q_out.data_ptr(), k_cache.data_ptr(),
      v_cache.data_ptr(), static_cast<int>(B), static_cast<int>(nh), static_cast<int>(nkv), static_cast<int>(hd),
      k_cache.stride(0), k_cache.stride(1), rotate, c10::cuda::getCurrentCUDAStream(qkv.device().index()).stream());
  QUARTET_CHECK(err == cudaSuccess, std::string("qkv_to_cache: kernel launch failed: ") + cudaGetErrorString(err));
#else
  (void)qkv, (void)cos, (void)sin_signed, (void)slot, (void)q_out, (void)k_cache, (void)v_cache, (void)nh, (void)nkv,
      (void)hd;
  QUARTET_CHECK(false, "qkv_to_cache: this build has no device kernels (CMake found no CUDA compiler)");
#endif
}

}  // namespace quartet
