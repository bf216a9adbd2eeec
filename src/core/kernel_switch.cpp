#include "quartet/core/kernel_switch.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

KernelSwitch::KernelSwitch(bool compiled_in, const char* variable, const char* setter)
    : compiled_in_(compiled_in), setter_(setter) {
  const char* v = std::getenv(variable);
  on_ = compiled_in && !(v && std::strcmp(v, "0") == 0);
}

void KernelSwitch::set(bool on) {
  QUARTET_CHECK(!on || compiled_in_,
                std::string(setter_) + ": this build has no device kernels (CMake found no CUDA compiler)");
  on_ = on;
}

}  // namespace quartet
