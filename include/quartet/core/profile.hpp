#pragma once
// A kernel-level profile of a stretch of a run, taken with Kineto (what torch.profiler uses):
// the device kernels grouped by name with their total time, the share of the wall time the
// device was busy, and a Chrome trace (chrome://tracing, Perfetto) of everything.
//
// `quartet train` profiles the phases of one iteration when the deck's profile.iteration = N
// (1-based): each phase gets its own table in the log and its own trace under
// <run.out>/profile/. For finding what bounds a phase, not for routine runs. profile.host = false
// records the device's activity (and the launches) only, leaving the host at its own speed.
#include <cstdint>
#include <string>

namespace quartet {

class KernelProfile {
 public:
  // host: record the host's operators too (else the device's activity and the launches only).
  explicit KernelProfile(bool host = true) : host_(host) {}
  // Starts collecting CPU operators and device activity (kernels, copies) on this thread.
  void start();
  bool running() const { return running_; }
  // Stops; writes the Chrome trace to trace_path unless it is empty, and returns a table of
  // the `top` longest kernel names (by total time), with the busy share and the kernel time
  // by kind (matrix multiplies, attention, communication, copies, the rest).
  std::string stop(const std::string& title, const std::string& trace_path, int top = 12);

 private:
  bool host_;
  bool running_ = false;
  double wall_start_ = 0;
};

}  // namespace quartet
