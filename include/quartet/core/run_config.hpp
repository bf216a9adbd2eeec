#pragma once
// The deck's [run] section: the run's name, output directory, seed, length and time budget, which
// every command reads.
#include <cstdint>
#include <string>
#include <vector>

#include "quartet/core/settings.hpp"

namespace quartet {

struct RunConfig {               // [run]
  std::string name = "quartet";  // run name, shown in logs and the run file
  std::string out = "runs/quartet";  // output directory
  std::uint64_t seed = 1;        // base random seed
  int iterations = 1;            // iterations of the command's main loop
  // Wall-clock budget in seconds (0 = none): train checkpoints and exits (status 75, to be
  // resubmitted) when the next iteration and a checkpoint might not fit in what is left.
  // Deck: seconds, or e.g. "90m", "23h30m", "1h5m30s"; also `train --time-limit`.
  double time_limit = 0;
  // Not a key: the stage sections whose data key is set ("sft", "rm", "dpo", in that order):
  // the command the deck is for (none: train). Set once every section is loaded
  // (commands/deck_sections.cpp).
  std::vector<std::string> stages;
  bool is_stage(const std::string& stage) const;  // `stage`'s data is set
};

const Section<RunConfig>& run_section();

// A deck belongs to one command: a set [sft], [rm] or [dpo] data key makes it that stage's deck.
// `command` ("train", "sft", "rm", "dpo") refuses the other stages' sections, naming the key.
void refuse_other_stages(const Config& config, const std::string& command);

}  // namespace quartet
