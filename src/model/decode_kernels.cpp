#include "quartet/model/decode_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"

#ifdef QUARTET_WITH_DEVICE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "decode_kernels/launch.hpp"
#endif

namespace quartet {

namespace {
const KernelSwitch g_switch(&KernelsConfig::decode, true, "set_decode_kernels");
const KernelSwitch g_qkv_fused(&KernelsConfig::decode_fused_qkv, true, "set_decode_qkv_fused");
const KernelSwitch g_attention(&KernelsConfig::decode_attention, true, "set_decode_attention");

[[maybe_unused]] void check_launch(const char* what, int err_code, const char* message) {
  QUARTET_CHECK(err_code == 0, std::string(what) + ": kernel launch failed: " + message);
}

[[maybe_unused]] bool float_or_bf16(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
}

constexpr const char* kNoKernels = "this build has no device kernels (CMake found no CUDA compiler)";

#ifdef QUARTET_WITH_DEVICE_KERNELS
// The caches and the mask of a decoding step's attention over `span` slots for B rows, as
// attend_decode and attend_decode_qkv take them: on x's device in its dtype (the mask also in
// float32). `what` names the caller.
void check_cache_and_mask(const char* what, const torch::Tensor& x, int64_t B, int64_t g, int64_t hd,
                          const torch::Tensor& k_cache, const torch::Tensor& v_cache, const torch::Tensor& bias,
                          int64_t span) {
  for (const auto* c : {&k_cache, &v_cache})
    QUARTET_CHECK(c->device() == x.device() && c->scalar_type() == x.scalar_type() && c->is_contiguous() &&
                      c->dim() == 4 && c->size(0) >= B && c->size(3) == hd && span >= 1 && span <= c->size(2),
                  std::string(what) + ": the caches must be contiguous [rows >= B, nkv, max_len >= span, hd] like q");
  QUARTET_CHECK(k_cache.sizes() == v_cache.sizes(), std::string(what) + ": the key and value caches differ in shape");
  const int64_t nkv = k_cache.size(1);
  // Any strides over rows and query heads (an expanded or viewed mask), unit stride over slots.
  QUARTET_CHECK(bias.device() == x.device() && bias.dim() == 3 && bias.size(0) == B * nkv && bias.size(1) == g &&
                    bias.size(2) == span && (span == 1 || bias.stride(2) == 1) &&
                    (bias.scalar_type() == x.scalar_type() || bias.scalar_type() == torch::kFloat32),
                std::string(what) +
                    ": bias must be [B * nkv, g, span] with unit stride over slots, in q's dtype or float32");
}

// The fused q/k/v product [B, (nh + 2 nkv) hd] and its rotation tables as attend_decode_qkv and
// attend_paged_qkv take them (bfloat16 heads of hd = 128, g of 1, 2, 4 or 8); returns B.
int64_t check_fused_qkv(const char* what, const torch::Tensor& qkv, const torch::Tensor& cos,
                        const torch::Tensor& sin_signed, int64_t nh, int64_t nkv, int64_t hd) {
  const std::string w(what);
  QUARTET_CHECK(nh >= 1 && nkv >= 1 && nh % nkv == 0, w + ": heads must be a multiple of the KV heads");
  QUARTET_CHECK(qkv.is_cuda() && qkv.scalar_type() == torch::kBFloat16 &&
                    attend_decode_supports(qkv.scalar_type(), nh / nkv, hd),
                w + ": needs bfloat16 heads of 128 with 1, 2, 4 or 8 query heads per KV head");
  const int64_t B = qkv.size(0);
  QUARTET_CHECK(qkv.dim() == 2 && qkv.size(1) == (nh + 2 * nkv) * hd && qkv.is_contiguous(),
                w + ": qkv must be contiguous [B, (nh + 2 nkv) hd]");
  for (const auto* t : {&cos, &sin_signed})
    QUARTET_CHECK(t->defined() && t->device() == qkv.device() && t->scalar_type() == qkv.scalar_type() &&
                      t->is_contiguous() && t->numel() == B * hd,
                  w + ": cos and sin_signed must be contiguous [B, hd] like qkv");
  return B;
}

// The splits' partial results (flash decoding), when the span takes more than one split;
// undefined (nothing to allocate on the decoding path) when one block covers it.
torch::Tensor split_partials(const torch::Tensor& x, int64_t B, int64_t nkv, int64_t g, int64_t span, int max_splits) {
  const int floats = kernels::attend_partial_floats(static_cast<int>(B), static_cast<int>(nkv), static_cast<int>(g),
                                                    static_cast<int>(span), max_splits);
  return floats > 0 ? torch::empty({floats}, x.options().dtype(torch::kFloat32)) : torch::Tensor();
}

// What the attention kernel reads in 16-byte vectors: aligned rows, every cached slot too.
bool aligned_for_attention(const torch::Tensor& x, const torch::Tensor& k_cache, const torch::Tensor& v_cache) {
  const auto at16 = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  return at16(x) && at16(k_cache) && at16(v_cache) && k_cache.stride(0) % 8 == 0 && k_cache.stride(1) % 8 == 0;
}
#endif
}  // namespace

bool decode_kernels_enabled() { return g_switch.on(); }

void set_decode_kernels(bool on) { g_switch.set(on); }

bool decode_attention_enabled() { return g_attention.on(); }
void set_decode_attention(bool on) { g_attention.set(on); }

bool attend_decode_supports(torch::ScalarType dtype, int64_t g, int64_t hd) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  return g >= 1 && g <= 8 && hd == 128 &&
         kernels::attend_in_registers(dtype == torch::kBFloat16, static_cast<int>(g), static_cast<int>(hd));
#else
  (void)dtype, (void)g, (void)hd;
  return false;  // no kernels at all
#endif
}

bool decode_attention_uses_kernel(torch::ScalarType dtype, int64_t g, int64_t hd) {
  return g_switch.on() && g_attention.on() && attend_decode_supports(dtype, g, hd);
}

void qkv_to_cache(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                  const torch::Tensor& slot, const torch::Tensor& q_out, const torch::Tensor& k_cache,
                  const torch::Tensor& v_cache, int64_t nh, int64_t nkv, int64_t hd) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
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
  check_launch("qkv_to_cache", err, cudaGetErrorString(err));
#else
  (void)qkv, (void)cos, (void)sin_signed, (void)slot, (void)q_out, (void)k_cache, (void)v_cache, (void)nh, (void)nkv,
      (void)hd;
  QUARTET_CHECK(false, "qkv_to_cache: this build has no device kernels (CMake found no CUDA compiler)");
#endif
}

std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& a,
                                                     const torch::Tensor& weight, double eps,
                                                     const torch::Tensor& sum_out) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(x.is_cuda() && float_or_bf16(x) && x.is_contiguous() && x.dim() >= 1,
                "add_rms_norm: x must be a contiguous float32 or bfloat16 CUDA tensor");
  const int64_t H = x.size(-1);
  QUARTET_CHECK(a.sizes() == x.sizes() && a.scalar_type() == x.scalar_type() && a.device() == x.device() &&
                    a.is_contiguous(),
                "add_rms_norm: a must be contiguous and like x");
  QUARTET_CHECK(weight.numel() == H && weight.scalar_type() == x.scalar_type() && weight.device() == x.device() &&
                    weight.is_contiguous(),
                "add_rms_norm: weight must be [H] like x");
  if (sum_out.defined())
    QUARTET_CHECK(sum_out.sizes() == x.sizes() && sum_out.scalar_type() == x.scalar_type() &&
                      sum_out.device() == x.device() && sum_out.is_contiguous(),
                  "add_rms_norm: sum_out must be contiguous and like x");
  auto sum = sum_out.defined() ? sum_out : torch::empty_like(x), normed = torch::empty_like(x);
  const int64_t R = x.numel() / H;
  if (R == 0) return {sum, normed};
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = kernels::launch_add_rms_norm(
      x.scalar_type() == torch::kBFloat16, x.data_ptr(), a.data_ptr(), weight.data_ptr(), sum.data_ptr(),
      normed.data_ptr(), static_cast<int>(R), static_cast<int>(H), static_cast<float>(eps),
      c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  check_launch("add_rms_norm", err, cudaGetErrorString(err));
  return {sum, normed};
#else
  (void)x, (void)a, (void)weight, (void)eps, (void)sum_out;
  QUARTET_CHECK(false, std::string("add_rms_norm: ") + kNoKernels);
  return {};
#endif
}

torch::Tensor silu_mul(const torch::Tensor& gate_up) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(gate_up.is_cuda() && float_or_bf16(gate_up) && gate_up.is_contiguous() && gate_up.dim() >= 1 &&
                    gate_up.size(-1) % 2 == 0,
                "silu_mul: gate_up must be a contiguous float32 or bfloat16 CUDA tensor [.., 2I]");
  const int64_t I = gate_up.size(-1) / 2, R = gate_up.numel() / (2 * std::max<int64_t>(I, 1));
  auto shape = gate_up.sizes().vec();
  shape.back() = I;
  auto out = torch::empty(shape, gate_up.options());
  if (out.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const cudaError_t err =
      kernels::launch_silu_mul(gate_up.scalar_type() == torch::kBFloat16, gate_up.data_ptr(), out.data_ptr(), R, I,
                               c10::cuda::getCurrentCUDAStream(gate_up.device().index()).stream());
  check_launch("silu_mul", err, cudaGetErrorString(err));
  return out;
#else
  (void)gate_up;
  QUARTET_CHECK(false, std::string("silu_mul: ") + kNoKernels);
  return {};
#endif
}

torch::Tensor attend_decode(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                            const torch::Tensor& bias, int64_t span, double scale, int max_splits,
                            const torch::Tensor& last_slot) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(q.is_cuda() && q.is_contiguous() && q.dim() == 3,
                "attend_decode: q must be a contiguous CUDA tensor [B, heads, hd]");
  const int64_t B = q.size(0), nh = q.size(1), hd = q.size(2);
  QUARTET_CHECK(k_cache.dim() == 4, "attend_decode: the caches must be [rows, nkv, max_len, hd]");
  const int64_t nkv = k_cache.size(1);
  QUARTET_CHECK(nkv >= 1 && nh % nkv == 0 && attend_decode_supports(q.scalar_type(), nh / nkv, hd),
                "attend_decode: needs bfloat16 heads of 128 with 1, 2, 4 or 8 query heads per KV head");
  const int64_t g = nh / nkv;
  check_cache_and_mask("attend_decode", q, B, g, hd, k_cache, v_cache, bias, span);
  QUARTET_CHECK(aligned_for_attention(q, k_cache, v_cache),
                "attend_decode: q and the caches must start on 16-byte boundaries");
  const bool bias_f32 = bias.scalar_type() == torch::kFloat32;
  QUARTET_CHECK(!last_slot.defined() || (last_slot.device() == q.device() && last_slot.scalar_type() == torch::kLong &&
                                          last_slot.numel() == 1),
                "attend_decode: last_slot must be one int64 on q's device");
  auto out = torch::empty_like(q);
  if (B == 0) return out;
  const auto partial = split_partials(q, B, nkv, g, span, max_splits);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaError_t err = kernels::launch_attend_decode(
      bias_f32, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), bias.data_ptr(), bias.stride(0), bias.stride(1),
      out.data_ptr(), partial.defined() ? partial.data_ptr<float>() : nullptr, static_cast<int>(B),
      static_cast<int>(nkv), static_cast<int>(g), static_cast<int>(span), k_cache.stride(0), k_cache.stride(1),
      static_cast<float>(scale), max_splits, last_slot.defined() ? last_slot.data_ptr<int64_t>() : nullptr,
      c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  check_launch("attend_decode", err, cudaGetErrorString(err));
  return out;
#else
  (void)q, (void)k_cache, (void)v_cache, (void)bias, (void)span, (void)scale, (void)max_splits, (void)last_slot;
  QUARTET_CHECK(false, std::string("attend_decode: ") + kNoKernels);
  return {};
#endif
}

bool decode_qkv_fused_enabled() { return g_qkv_fused.on(); }
void set_decode_qkv_fused(bool on) { g_qkv_fused.set(on); }

bool attend_decode_qkv_supports(torch::ScalarType dtype, int64_t g, int64_t hd) {
  return attend_decode_supports(dtype, g, hd);
}

torch::Tensor attend_decode_qkv(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                                const torch::Tensor& slot, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                                const torch::Tensor& bias, int64_t span, double scale, int64_t nh, int64_t nkv,
                                int max_splits) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const int64_t hd = k_cache.dim() == 4 ? k_cache.size(3) : 0, g = nh / std::max<int64_t>(nkv, 1);
  const int64_t B = check_fused_qkv("attend_decode_qkv", qkv, cos, sin_signed, nh, nkv, hd);
  QUARTET_CHECK(k_cache.size(1) == nkv, "attend_decode_qkv: the caches must have nkv heads");
  check_cache_and_mask("attend_decode_qkv", qkv, B, g, hd, k_cache, v_cache, bias, span);
  QUARTET_CHECK(aligned_for_attention(qkv, k_cache, v_cache),
                "attend_decode_qkv: qkv and the caches must start on 16-byte boundaries");
  QUARTET_CHECK(slot.device() == qkv.device() && slot.scalar_type() == torch::kLong && slot.numel() == 1,
                "attend_decode_qkv: slot must be one int64 on the device");
  const bool bias_f32 = bias.scalar_type() == torch::kFloat32;
  auto out = torch::empty({B, nh, hd}, qkv.options());
  if (B == 0) return out;
  const auto partial = split_partials(qkv, B, nkv, g, span, max_splits);
  const c10::cuda::CUDAGuard guard(qkv.device());
  const cudaError_t err = kernels::launch_attend_qkv(
      bias_f32, qkv.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(), slot.data_ptr<int64_t>(), k_cache.data_ptr(),
      v_cache.data_ptr(), bias.data_ptr(), bias.stride(0), bias.stride(1), out.data_ptr(),
      partial.defined() ? partial.data_ptr<float>() : nullptr, static_cast<int>(B), static_cast<int>(nh),
      static_cast<int>(nkv), static_cast<int>(span), k_cache.stride(0), k_cache.stride(1), static_cast<float>(scale),
      max_splits, c10::cuda::getCurrentCUDAStream(qkv.device().index()).stream());
  check_launch("attend_decode_qkv", err, cudaGetErrorString(err));
  return out;
#else
  (void)qkv, (void)cos, (void)sin_signed, (void)slot, (void)k_cache, (void)v_cache, (void)bias, (void)span,
      (void)scale, (void)nh, (void)nkv, (void)max_splits;
  QUARTET_CHECK(false, std::string("attend_decode_qkv: ") + kNoKernels);
  return {};
#endif
}

bool attend_paged_supports(torch::ScalarType dtype, int64_t g, int64_t hd) {
  return attend_decode_supports(dtype, g, hd);
}

torch::Tensor attend_paged_qkv(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin_signed,
                               const torch::Tensor& k_pool, const torch::Tensor& v_pool, const torch::Tensor& table,
                               const torch::Tensor& context, int64_t span, double scale, int64_t nh, int64_t nkv,
                               int64_t window, int max_splits) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const int64_t hd = k_pool.dim() == 4 ? k_pool.size(3) : 0, g = nh / std::max<int64_t>(nkv, 1);
  const int64_t B = check_fused_qkv("attend_paged_qkv", qkv, cos, sin_signed, nh, nkv, hd);
  for (const auto* p : {&k_pool, &v_pool})
    QUARTET_CHECK(p->device() == qkv.device() && p->scalar_type() == qkv.scalar_type() && p->is_contiguous() &&
                      p->dim() == 4 && p->size(2) == nkv && p->sizes() == k_pool.sizes(),
                  "attend_paged_qkv: the pools must be contiguous [blocks, block_size, nkv, hd] like qkv");
  QUARTET_CHECK(table.device() == qkv.device() && table.scalar_type() == torch::kInt && table.dim() == 2 &&
                    table.size(0) == B && table.stride(1) == 1,
                "attend_paged_qkv: the block table must be int32 [B, blocks] on qkv's device");
  QUARTET_CHECK(context.device() == qkv.device() && context.scalar_type() == torch::kLong && context.numel() == B &&
                    context.is_contiguous(),
                "attend_paged_qkv: context must be int64 [B] on qkv's device");
  QUARTET_CHECK(span >= 1 && span <= table.size(1) * k_pool.size(1) && window >= 0,
                "attend_paged_qkv: span must be within a row's blocks, the window not negative");
  QUARTET_CHECK(aligned_for_attention(qkv, k_pool, v_pool), "attend_paged_qkv: qkv and the pools must start on 16-byte boundaries");
  auto out = torch::empty({B, nh, hd}, qkv.options());
  if (B == 0) return out;
  const auto partial = split_partials(qkv, B, nkv, g, span, max_splits);
  const c10::cuda::CUDAGuard guard(qkv.device());
  const cudaError_t err = kernels::launch_attend_paged_qkv(
      qkv.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(),
      table.data_ptr<int32_t>(), table.stride(0), static_cast<int>(k_pool.size(1)), context.data_ptr<int64_t>(),
      static_cast<int>(window), out.data_ptr(), partial.defined() ? partial.data_ptr<float>() : nullptr,
      static_cast<int>(B), static_cast<int>(nh), static_cast<int>(nkv), static_cast<int>(span),
      static_cast<float>(scale), max_splits, c10::cuda::getCurrentCUDAStream(qkv.device().index()).stream());
  check_launch("attend_paged_qkv", err, cudaGetErrorString(err));
  return out;
#else
  (void)qkv, (void)cos, (void)sin_signed, (void)k_pool, (void)v_pool, (void)table, (void)context, (void)span,
      (void)scale, (void)nh, (void)nkv, (void)window, (void)max_splits;
  QUARTET_CHECK(false, std::string("attend_paged_qkv: ") + kNoKernels);
  return {};
#endif
}

torch::Tensor sample_race(const torch::Tensor& logits, const torch::Tensor& race, double temperature,
                          const torch::Tensor& min_key) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(logits.is_cuda() && float_or_bf16(logits) && logits.dim() == 2 && logits.stride(1) == 1,
                "sample_race: logits must be a float32 or bfloat16 CUDA tensor [B, V] with unit stride along V");
  QUARTET_CHECK(race.device() == logits.device() && race.scalar_type() == torch::kFloat32 && race.is_contiguous() &&
                    race.sizes() == logits.sizes(),
                "sample_race: race must be a contiguous float32 tensor shaped like logits");
  QUARTET_CHECK(temperature > 0, "sample_race: the temperature must be positive");
  QUARTET_CHECK(!min_key.defined() || (min_key.device() == logits.device() && min_key.scalar_type() == torch::kInt &&
                                       min_key.is_contiguous() && min_key.numel() == logits.size(0)),
                "sample_race: min_key must be a contiguous int32 tensor [B] on the logits' device (top_p_keys)");
  auto out = torch::empty({logits.size(0)}, logits.options().dtype(torch::kLong));
  if (logits.size(0) == 0) return out;
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaError_t err = kernels::launch_sample_race(
      logits.scalar_type() == torch::kBFloat16, logits.data_ptr(), logits.stride(0), race.data_ptr<float>(),
      static_cast<int>(logits.size(0)), static_cast<int>(logits.size(1)), static_cast<float>(temperature),
      min_key.defined() ? reinterpret_cast<const uint32_t*>(min_key.data_ptr<int32_t>()) : nullptr,
      out.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream(logits.device().index()).stream());
  check_launch("sample_race", err, cudaGetErrorString(err));
  return out;
#else
  (void)logits, (void)race, (void)temperature, (void)min_key;
  QUARTET_CHECK(false, std::string("sample_race: ") + kNoKernels);
  return {};
#endif
}

torch::Tensor top_p_keys(const torch::Tensor& logits, double temperature, double top_p) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(logits.is_cuda() && float_or_bf16(logits) && logits.dim() == 2 && logits.stride(1) == 1,
                "top_p_keys: logits must be a float32 or bfloat16 CUDA tensor [B, V] with unit stride along V");
  QUARTET_CHECK(temperature > 0 && top_p > 0 && top_p < 1,
                "top_p_keys: the temperature must be positive and top_p in (0, 1)");
  auto keys = torch::empty({logits.size(0)}, logits.options().dtype(torch::kInt));
  if (logits.size(0) == 0) return keys;
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaError_t err = kernels::launch_top_p_keys(
      logits.scalar_type() == torch::kBFloat16, logits.data_ptr(), logits.stride(0), static_cast<int>(logits.size(0)),
      static_cast<int>(logits.size(1)), static_cast<float>(temperature), top_p,
      reinterpret_cast<uint32_t*>(keys.data_ptr<int32_t>()), c10::cuda::getCurrentCUDAStream(logits.device().index()).stream());
  check_launch("top_p_keys", err, cudaGetErrorString(err));
  return keys;
#else
  (void)logits, (void)temperature, (void)top_p;
  QUARTET_CHECK(false, std::string("top_p_keys: ") + kNoKernels);
  return {};
#endif
}

void advance_decode(const torch::Tensor& next, const torch::Tensor& done, const torch::Tensor& hist,
                    const torch::Tensor& hist_mask, const torch::Tensor& lengths, const torch::Tensor& tok,
                    const torch::Tensor& stop_ids, const torch::Tensor& step, const torch::Tensor& pos,
                    const torch::Tensor& slot, int64_t pad_id) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  const int64_t rows = next.numel();
  const auto dev = next.device();
  auto long_on_dev = [&](const torch::Tensor& t, int64_t n) {
    return t.device() == dev && t.scalar_type() == torch::kLong && t.is_contiguous() && t.numel() >= n;
  };
  QUARTET_CHECK(next.is_cuda() && next.dim() == 1 && long_on_dev(next, rows),
                "advance_decode: next must be a contiguous int64 CUDA tensor [rows]");
  QUARTET_CHECK(done.device() == dev && done.scalar_type() == torch::kBool && done.is_contiguous() &&
                    done.numel() >= rows,
                "advance_decode: done must be a contiguous bool tensor of at least rows elements");
  QUARTET_CHECK(hist.dim() == 2 && hist.size(0) >= rows && long_on_dev(hist, 0) && hist_mask.sizes() == hist.sizes() &&
                    long_on_dev(hist_mask, 0),
                "advance_decode: hist and hist_mask must be contiguous int64 [>= rows, N] alike");
  QUARTET_CHECK(long_on_dev(lengths, rows) && long_on_dev(tok, rows) && long_on_dev(step, 1) && step.numel() == 1,
                "advance_decode: lengths, tok ([>= rows]) and step ([1]) must be contiguous int64 on next's device");
  QUARTET_CHECK(!stop_ids.defined() || long_on_dev(stop_ids, 0),
                "advance_decode: stop_ids must be contiguous int64 on next's device");
  QUARTET_CHECK(!pos.defined() || long_on_dev(pos, rows), "advance_decode: pos must be int64 [>= rows]");
  QUARTET_CHECK(!slot.defined() || (long_on_dev(slot, 1) && slot.numel() == 1), "advance_decode: slot must be int64 [1]");
  const c10::cuda::CUDAGuard guard(dev);
  const cudaError_t err = kernels::launch_advance_decode(
      next.data_ptr<int64_t>(), done.data_ptr<bool>(), hist.data_ptr<int64_t>(), hist_mask.data_ptr<int64_t>(),
      hist.size(1), lengths.data_ptr<int64_t>(), tok.data_ptr<int64_t>(),
      stop_ids.defined() ? stop_ids.data_ptr<int64_t>() : nullptr,
      stop_ids.defined() ? static_cast<int>(stop_ids.numel()) : 0, step.data_ptr<int64_t>(),
      pos.defined() ? pos.data_ptr<int64_t>() : nullptr, slot.defined() ? slot.data_ptr<int64_t>() : nullptr, pad_id,
      static_cast<int>(rows), c10::cuda::getCurrentCUDAStream(dev.index()).stream());
  check_launch("advance_decode", err, cudaGetErrorString(err));
#else
  (void)next, (void)done, (void)hist, (void)hist_mask, (void)lengths, (void)tok, (void)stop_ids, (void)step, (void)pos,
      (void)slot, (void)pad_id;
  QUARTET_CHECK(false, std::string("advance_decode: ") + kNoKernels);
#endif
}

torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& bias) {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  QUARTET_CHECK(scores.is_cuda() && float_or_bf16(scores) && scores.is_contiguous() && scores.dim() >= 1,
                "masked_softmax: scores must be a contiguous float32 or bfloat16 CUDA tensor");
  QUARTET_CHECK(bias.sizes() == scores.sizes() && bias.scalar_type() == scores.scalar_type() &&
                    bias.device() == scores.device() && bias.is_contiguous(),
                "masked_softmax: bias must be contiguous and like scores");
  auto out = torch::empty_like(scores);
  const int64_t S = scores.size(-1), R = S > 0 ? scores.numel() / S : 0;
  if (R == 0) return out;
  const c10::cuda::CUDAGuard guard(scores.device());
  const cudaError_t err = kernels::launch_masked_softmax(
      scores.scalar_type() == torch::kBFloat16, scores.data_ptr(), bias.data_ptr(), out.data_ptr(),
      static_cast<int>(R), static_cast<int>(S), c10::cuda::getCurrentCUDAStream(scores.device().index()).stream());
  check_launch("masked_softmax", err, cudaGetErrorString(err));
  return out;
#else
  (void)scores, (void)bias;
  QUARTET_CHECK(false, std::string("masked_softmax: ") + kNoKernels);
  return {};
#endif
}

}  // namespace quartet
