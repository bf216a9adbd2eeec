#include "quartet/rl/output_config.hpp"

namespace quartet {

const Section<OutputConfig>& output_section() {
  using O = OutputConfig;
  static const Section<O> section("output", "Output", {
      key("log_every", &O::log_every, at_least(1), "print the iteration's log line every N iterations and after the last (>= 1; run.h5 records every iteration)"),
      key("sample_every", &O::sample_every, at_least(0), "print one sampled prompt, completion and score every N iterations (0 = never)"),
      key("rollouts_every", &O::rollouts_every, at_least(0), "store the rollouts in <run.out>/run.h5 every N iterations (0 = never)"),
  });
  return section;
}

}  // namespace quartet
