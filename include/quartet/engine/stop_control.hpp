#pragma once
// When `train` stops early (core/signals.hpp has the signals' side). A stop request (SIGUSR1,
// SIGTERM; a launcher's signal through `quartet launch`) only sets a flag; the ranks look at it
// together at safe points: after an iteration (checkpoint, exit 75), or, on a second request,
// between phases too (no checkpoint, exit 76). run.time_limit stops after the iteration whose
// successor and its checkpoint might not fit in what is left.
#include "quartet/dist/world.hpp"

namespace quartet {

enum class Stop { none, signal, time_limit, now };

class StopControl {
 public:
  // started: monotonic_seconds() when train began; time_limit 0 = none.
  StopControl(const World& world, double time_limit, double started)
      : world_(world), time_limit_(time_limit), started_(started) {}
  // Collective, between phases: true when any rank has had a second stop request.
  bool stop_now() const;
  // Collective: true when any rank has had a stop request (before the first iteration: a
  // request during start-up ends the run there, exit 75, with nothing to checkpoint).
  bool requested() const;
  // Collective, after an iteration of `iteration_seconds`; `checkpoint_seconds`: the last
  // checkpoint's write time (0 before the first).
  Stop after_iteration(double iteration_seconds, double checkpoint_seconds) const;

 private:
  int requests_on_any_rank() const;  // collective: the largest count of stop requests

  const World& world_;
  double time_limit_;
  double started_;
};

}  // namespace quartet
