#include "quartet/engine/profile_config.hpp"

namespace quartet {

const Section<ProfileConfig>& profile_section() {
  using P = ProfileConfig;
  static const Section<P> section("profile", "Profiling", {
      key("iteration", &P::iteration, at_least(0), "train: profile this iteration's phases (1-based; 0 = none): a kernel table per phase in the log, Chrome traces under <run.out>/profile/"),
      key("host", &P::host, "with profile.iteration: record host operators too; false: device activity and launches only (the host then runs at its own speed)"),
  });
  return section;
}

}  // namespace quartet
