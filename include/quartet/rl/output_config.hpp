#pragma once
// The deck's [output] section: what `quartet train` prints and stores of its rollouts.
#include "quartet/core/settings.hpp"

namespace quartet {

struct OutputConfig {       // [output]
  int log_every = 1;        // the iteration's log line every N iterations, and after the last
  int sample_every = 0;     // print one sampled completion every N iterations (0 = never)
  int rollouts_every = 10;  // store the rollouts in the run file every N iterations (0 = never)
};

const Section<OutputConfig>& output_section();

}  // namespace quartet
