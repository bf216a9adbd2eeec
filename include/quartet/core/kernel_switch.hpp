#pragma once
// The switches of quartet's own kernels and fused paths, as the code that chooses between them
// and ATen's operations reads them: the deck's [kernels] section (core/kernels_config.hpp),
// installed once at start-up (start_runtime, before any model is built). Tests and benchmarks
// switch one family through its own set_*() function (set_rotary_kernel, ...), which holds a
// KernelSwitch.
#include "quartet/core/kernels_config.hpp"

namespace quartet {

// The switches in force: the defaults (every kernel the build has on) until use_kernels().
const KernelsConfig& kernels_in_use();
// Installs every switch of the section; a device kernel switched on in a build without device
// kernels is refused (load_kernels_config has refused it already, naming the deck's key).
void use_kernels(const KernelsConfig& kernels);

// One family's switch: a member of the installed KernelsConfig.
class KernelSwitch {
 public:
  // needs_device: the family is one of quartet's device kernels (so refused where the build has
  // none); setter: the public function that calls set(), for the refusal's message.
  KernelSwitch(bool KernelsConfig::*field, bool needs_device, const char* setter)
      : field_(field), needs_device_(needs_device), setter_(setter) {}
  bool on() const { return kernels_in_use().*field_; }
  void set(bool on) const;

 private:
  bool KernelsConfig::*field_;
  bool needs_device_;
  const char* setter_;
};

}  // namespace quartet
