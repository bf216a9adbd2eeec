#include "quartet/core/kernels_config.hpp"

#include <string>

namespace quartet {

bool device_kernels_built() {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  return true;
#else
  return false;
#endif
}

Section<KernelsConfig> kernels_section(bool kernels_built) {
  using K = KernelsConfig;
  const std::string where = kernels_built ? "" : " (this build has none: false)";
  // A kernel of quartet's own, refused where the build has none.
  const Check<bool> built = [kernels_built](const bool& on) {
    return on && !kernels_built ? "is true, but this build has no device kernels (CMake found no CUDA compiler): set it to false"
                                : "";
  };
  return Section<K>("kernels", "Kernels", {
      key("decode", &K::decode, built, "the decoding step's own kernels on CUDA tensors (rotation and cache write, residual add and RMSNorm, SiLU x up, sampling, bookkeeping, masked softmax, attention; the residual add and RMSNorm of passes without gradients too); false: ATen's operations" + where),
      key("decode_fused_qkv", &K::decode_fused_qkv, built, "with decode and decode_attention: a Llama step's cache write and attention in one kernel (the same bits as two)" + where),
      key("decode_attention", &K::decode_attention, built, "with decode: a decoding step's attention in quartet's register kernel where it applies (bfloat16 heads of 128, 1, 2, 4 or 8 query heads per KV head); false: ATen's products always" + where),
      key("rotary", &K::rotary, built, "rotary embeddings in one kernel each way (the same bits as ATen's five operations)" + where),
      key("swiglu", &K::swiglu, built, "SiLU(gate) x up in one kernel each way, its backward keeping gate and up only" + where),
      key("adamw", &K::adamw, built, "AdamW over device-resident shards in one pass, bfloat16 gradients read in place, clipping's norm in a few launches" + where),
      key("packed_products", &K::packed_products, "adjacent q/k/v and gate/up weights multiplied as one product on CUDA (differs from separate products by rounding)"),
      key("unmasked_attention", &K::unmasked_attention, "scoring and updates attend without a mask where a batch's padding allows it (trailing, or leading shifted away); false: every batch with its mask"),
  });
}

const Section<KernelsConfig>& kernels_section() {
  static const Section<KernelsConfig> section = kernels_section(device_kernels_built());
  return section;
}

}  // namespace quartet
