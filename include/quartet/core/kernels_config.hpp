#pragma once
// The deck's [kernels] section: which of quartet's own device kernels and fused paths a run takes
// instead of ATen's operations. Recorded in run.h5 with the rest of the resolved deck, so that two
// runs of one recorded deck compute alike. start_runtime installs it (core/kernel_switch.hpp).
#include "quartet/core/settings.hpp"

namespace quartet {

// Whether this build has quartet's device kernels (CMake found a CUDA compiler): the default of
// every [kernels] key that needs them; one set to true in a build without them is refused.
bool device_kernels_built();

struct KernelsConfig {  // [kernels]
  // quartet's device kernels, each used on CUDA tensors of the shapes it takes (elsewhere the
  // ATen path runs anyway). Default: on where the build has them.
  bool decode = device_kernels_built();            // the decoding step's kernels (model/decode_kernels.hpp)
  bool decode_fused_qkv = device_kernels_built();  // with decode: cache write and attention in one kernel
  bool decode_attention = device_kernels_built();  // with decode: the register attention kernel where it applies
  bool rotary = device_kernels_built();            // rotary embeddings (model/rotary_kernel.hpp)
  bool swiglu = device_kernels_built();            // SiLU(gate) * up (model/swiglu_kernel.hpp)
  bool adamw = device_kernels_built();             // AdamW, gradient landing and norm (shard/adamw_kernel.hpp)
  // Paths that need no kernel of quartet's own.
  bool packed_products = true;     // adjacent q/k/v and gate/up weights as one product (model/packed_linear.hpp)
  bool unmasked_attention = true;  // no attention mask where a batch's padding allows (engine/experience.hpp)
};

// The section's rows. kernels_built: whether the build has device kernels (a parameter so that
// both verdicts can be tested in one build): a kernel key set to true without them is refused.
const Section<KernelsConfig>& kernels_section();
Section<KernelsConfig> kernels_section(bool kernels_built);

}  // namespace quartet
