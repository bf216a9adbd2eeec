#include "quartet/core/kernel_switch.hpp"

#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

constexpr const char* kNoKernels = ": this build has no device kernels (CMake found no CUDA compiler)";

KernelsConfig& installed() {
  static KernelsConfig kernels;
  return kernels;
}

}  // namespace

const KernelsConfig& kernels_in_use() { return installed(); }

void use_kernels(const KernelsConfig& kernels) {
  const bool any_device = kernels.decode || kernels.decode_fused_qkv || kernels.decode_attention || kernels.rotary ||
                          kernels.swiglu || kernels.adamw;
  QUARTET_CHECK(!any_device || device_kernels_built(), std::string("use_kernels") + kNoKernels);
  installed() = kernels;
}

void KernelSwitch::set(bool on) const {
  QUARTET_CHECK(!on || !needs_device_ || device_kernels_built(), std::string(setter_) + kNoKernels);
  installed().*field_ = on;
}

}  // namespace quartet
