#pragma once
// The deck's [checkpoint] section: when to write checkpoints, which to keep, where to resume
// from (engine/training_checkpoint.hpp).
#include <string>

#include "quartet/core/settings.hpp"

namespace quartet {

enum class OnDamaged { refuse, start_over };  // checkpoint.on_damaged
const char* name_of(OnDamaged value);

struct CheckpointConfig {       // [checkpoint]
  int every = 0;                // a checkpoint every N iterations (0 = only at the end and on a stop)
  int keep = 2;                 // complete checkpoints kept (the newest N; >= 1)
  int keep_every = 0;           // also keep those whose iteration is a multiple of N (0 = none)
  bool at_end = true;           // a checkpoint after the last iteration
  // auto: continue from the newest complete checkpoint in <run.out>/checkpoints (none: start);
  // never: start from scratch (refused if run.out already holds checkpoints);
  // a step_<N> directory: continue from that one.
  std::string resume = "auto";
  // What resume = auto does when run.out holds checkpoints and none of them is intact:
  // refuse (name each and its fault, exit 2, touch nothing) | start_over (move them aside to
  // checkpoints.damaged-<time>/ and start at iteration 0).
  OnDamaged on_damaged = OnDamaged::refuse;
};

const Section<CheckpointConfig>& checkpoint_section();

}  // namespace quartet
