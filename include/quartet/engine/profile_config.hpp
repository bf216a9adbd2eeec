#pragma once
// The deck's [profile] section: which iteration (or step) a run profiles (engine/phase_clock.hpp).
#include "quartet/core/settings.hpp"

namespace quartet {

struct ProfileConfig {  // [profile]
  int iteration = 0;  // `quartet train` profiles this iteration's phases (1-based; 0 = none)
  bool host = true;   // false: device activity only (recording host operators slows the host)
};

const Section<ProfileConfig>& profile_section();

}  // namespace quartet
