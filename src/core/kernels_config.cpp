#include "quartet/core/kernels_config.hpp"

#include <boost/program_options/options_description.hpp>

#include <string>

#include "quartet/core/deck.hpp"

namespace po = boost::program_options;

namespace quartet {

bool device_kernels_built() {
#ifdef QUARTET_WITH_DEVICE_KERNELS
  return true;
#else
  return false;
#endif
}

namespace {

// The [kernels] keys that need quartet's device kernels, with their fields.
struct DeviceKey {
  const char* key;
  bool KernelsConfig::*field;
};
constexpr DeviceKey kDeviceKeys[] = {
    {"kernels.decode", &KernelsConfig::decode},   {"kernels.decode_fused_qkv", &KernelsConfig::decode_fused_qkv},
    {"kernels.decode_attention", &KernelsConfig::decode_attention}, {"kernels.rotary", &KernelsConfig::rotary},
    {"kernels.swiglu", &KernelsConfig::swiglu},   {"kernels.adamw", &KernelsConfig::adamw}};

}  // namespace

po::options_description kernels_schema() {
  const KernelsConfig k;
  const ProfileConfig p;
  const std::string where = device_kernels_built() ? "" : " (this build has none: false)";
  po::options_description d("Kernels and profiling");
  d.add_options()
    ("kernels.decode", po::value<bool>()->default_value(k.decode), ("the decoding step's own kernels on CUDA tensors (rotation and cache write, residual add and RMSNorm, SiLU x up, sampling, bookkeeping, masked softmax, attention; the residual add and RMSNorm of passes without gradients too); false: ATen's operations" + where).c_str())
    ("kernels.decode_fused_qkv", po::value<bool>()->default_value(k.decode_fused_qkv), ("with decode and decode_attention: a Llama step's cache write and attention in one kernel (the same bits as two)" + where).c_str())
    ("kernels.decode_attention", po::value<bool>()->default_value(k.decode_attention), ("with decode: a decoding step's attention in quartet's register kernel where it applies (bfloat16 heads of 128, 1, 2, 4 or 8 query heads per KV head); false: ATen's products always" + where).c_str())
    ("kernels.rotary", po::value<bool>()->default_value(k.rotary), ("rotary embeddings in one kernel each way (the same bits as ATen's five operations)" + where).c_str())
    ("kernels.swiglu", po::value<bool>()->default_value(k.swiglu), ("SiLU(gate) x up in one kernel each way, its backward keeping gate and up only" + where).c_str())
    ("kernels.adamw", po::value<bool>()->default_value(k.adamw), ("AdamW over device-resident shards in one pass, bfloat16 gradients read in place, clipping's norm in a few launches" + where).c_str())
    ("kernels.packed_products", po::value<bool>()->default_value(k.packed_products), "adjacent q/k/v and gate/up weights multiplied as one product on CUDA (differs from separate products by rounding)")
    ("kernels.unmasked_attention", po::value<bool>()->default_value(k.unmasked_attention), "scoring and updates attend without a mask where a batch's padding allows it (trailing, or leading shifted away); false: every batch with its mask")
    ("profile.iteration", po::value<int>()->default_value(p.iteration), "train: profile this iteration's phases (1-based; 0 = none): a kernel table per phase in the log, Chrome traces under <run.out>/profile/")
    ("profile.host", po::value<bool>()->default_value(p.host), "with profile.iteration: record host operators too; false: device activity and launches only (the host then runs at its own speed)");
  return d;
}

KernelsConfig load_kernels_config(const Deck& deck, bool kernels_built) {
  KernelsConfig k;
  for (const auto& [key, field] : kDeviceKeys) {
    k.*field = deck.get<bool>(key);
    if (k.*field && !kernels_built)
      deck.fail(key, "is true, but this build has no device kernels (CMake found no CUDA compiler): set it to false");
  }
  k.packed_products = deck.get<bool>("kernels.packed_products");
  k.unmasked_attention = deck.get<bool>("kernels.unmasked_attention");
  return k;
}

ProfileConfig load_profile_config(const Deck& deck) {
  ProfileConfig p;
  p.iteration = deck.get<int>("profile.iteration");
  if (p.iteration < 0) deck.fail("profile.iteration", "must be >= 0 (0: no profile)");
  p.host = deck.get<bool>("profile.host");
  return p;
}

}  // namespace quartet
