#pragma once
// The seconds of each phase of an iteration on this rank, the device's peak memory in each
// phase over the run (GPU only), and a kernel profile of every phase of one chosen iteration
// (core/profile.hpp: a table in the log and a Chrome trace under <run.out>/profile/).
#include <torch/types.h>

#include <array>
#include <string>

#include "quartet/core/config.hpp"
#include "quartet/core/profile.hpp"
#include "quartet/engine/profile_config.hpp"

namespace quartet {

// The phases of an iteration (rl/iteration.hpp) or a stage's step (tune/stage.hpp), which the
// clock times: a stage's steps are train, its held-out measurements eval. eval: the [eval]
// measurements taken in the iteration (rl/evaluator.hpp), 0 when none.
enum Phase { kGenerate, kScore, kAdvantages, kTrain, kEval, kPhases };
constexpr std::array<const char*, kPhases> kPhaseNames = {"generate", "score", "advantages", "train", "eval"};

class PhaseClock {
 public:
  // profile: the deck's [profile] (which iteration, 1-based, 0 = none; host activity or not).
  PhaseClock(torch::Device device, int rank, const ProfileConfig& profile, std::string profile_dir);

  // Zeroes the phase times and the device's peak, starts the first phase; profiles this
  // iteration when it is the one.
  void begin_iteration(int index);
  void start();          // a phase starts now (what runs between end() and start() counts nowhere)
  void end(Phase phase); // ... and ends now: its time, its peak, its profile
  // Charges the time since start() to `phase` and starts again: a scoring rank's wait for the
  // actor's first chunk is the actor's generation, not scoring.
  void charge_wait(Phase phase);

  double seconds(Phase phase) const { return seconds_[phase]; }
  double iteration_seconds() const;  // since begin_iteration
  const std::array<double, kPhases>& all_seconds() const { return seconds_; }
  const std::array<double, kPhases>& peak_bytes() const { return peak_bytes_; }

 private:
  torch::Device device_;
  int rank_;
  int profile_iteration_;
  std::string profile_dir_;
  KernelProfile profile_;
  double iteration_start_ = 0, phase_start_ = 0;
  std::array<double, kPhases> seconds_{};
  std::array<double, kPhases> peak_bytes_{};  // the run's, per phase
};

double monotonic_seconds();

}  // namespace quartet
