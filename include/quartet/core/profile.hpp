#pragma once
// A kernel-level profile of a stretch of a run, taken with Kineto (what torch.profiler uses):
// the device kernels grouped by name with their total time, the share of the wall time the
// device was busy, and a Chrome trace (chrome://tracing, Perfetto) of everything.
//
// `quartet train` profiles the phases of one iteration when QUARTET_PROFILE_ITERATION=N is
// set (1-based): each phase gets its own table in the log and its own trace under
// <run.out>/profile/. For finding what bounds a phase, not for routine runs. QUARTET_PROFILE_HOST=0
// records the device's activity (and the launches) only, leaving the host at its own speed.
#include <cstdint>
#include <string>

namespace quartet {

class KernelProfile {
 public:
  // Starts collecting CPU operators and device activity (kernels, copies) on this thread.
  void start();
  bool running() const { return running_; }
  // Stops; writes the Chrome trace to trace_path unless it is empty, and returns a table of
  // the `top` longest kernel names (by total time), with the busy share and the kernel time
  // by kind (matrix multiplies, attention, communication, copies, the rest).
  std::string stop(const std::string& title, const std::string& trace_path, int top = 12);

 private:
  bool running_ = false;
  double wall_start_ = 0;
};

// The iteration QUARTET_PROFILE_ITERATION asks for (1-based), or 0.
int profile_iteration_from_env();

}  // namespace quartet
