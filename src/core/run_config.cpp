#include "quartet/core/run_config.hpp"

#include <string>

#include "quartet/core/units.hpp"

namespace quartet {

bool RunConfig::is_stage(const std::string& stage) const {
  for (const std::string& s : stages)
    if (s == stage) return true;
  return false;
}

const Section<RunConfig>& run_section() {
  using R = RunConfig;
  static const Section<R> section("run", "The run", {
      key("name", &R::name, "run name, for logs and the run file"),
      key("out", &R::out, "output directory (run.h5, checkpoints/)"),
      key("seed", &R::seed, "base random seed"),
      key("iterations", &R::iterations, at_least(1), "iterations of the main loop (count, >= 1)"),
      parsed<R, double>("time_limit", &R::time_limit, "0", parse_duration,
                        "wall-clock budget: checkpoint and exit 75 (resubmit) before it runs out; seconds or e.g. "
                        "90m, 23h30m (0 = none)"),
  });
  return section;
}

void refuse_other_stages(const Config& config, const std::string& command) {
  for (const std::string& stage : config.get<RunConfig>().stages)
    if (command != stage)
      config.deck.fail(stage + ".data", "is set: this is a deck of quartet " + stage + " DECK, and quartet " + command +
                                            " does not read [" + stage + "]");
}

}  // namespace quartet
