#include "quartet/engine/phase_clock.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "quartet/core/files.hpp"
#include "quartet/dist/device_memory.hpp"
#include "quartet/engine/profile_config.hpp"

namespace quartet {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

PhaseClock::PhaseClock(torch::Device device, int rank, const ProfileConfig& profile, std::string profile_dir)
    : device_(device), rank_(rank), profile_iteration_(profile.iteration), profile_dir_(std::move(profile_dir)),
      profile_(profile.host) {}

void PhaseClock::begin_iteration(int index) {
  seconds_.fill(0.0);
  iteration_start_ = monotonic_seconds();
  if (device_.is_cuda()) reset_peak_memory(device_);
  if (index + 1 == profile_iteration_) {
    synchronize_device(device_);
    profile_.start();
  }
  start();
}

void PhaseClock::start() { phase_start_ = monotonic_seconds(); }

void PhaseClock::charge_wait(Phase phase) {
  const double now = monotonic_seconds();
  seconds_[phase] += now - phase_start_;
  phase_start_ = now;
}

void PhaseClock::end(Phase phase) {
  if (device_.is_cuda()) {
    synchronize_device(device_);
    peak_bytes_[phase] = std::max(peak_bytes_[phase], static_cast<double>(device_memory(device_).peak_allocated));
    reset_peak_memory(device_);
  }
  seconds_[phase] += monotonic_seconds() - phase_start_;
  if (profile_.running()) {
    make_directories(profile_dir_);
    const std::string name = kPhaseNames[phase];
    const std::string text = profile_.stop(name + " (rank " + std::to_string(rank_) + ")",
                                           profile_dir_ + "/" + name + "_rank" + std::to_string(rank_) + ".json");
    std::printf("%s", text.c_str());
    std::fflush(stdout);
    if (phase != kTrain) profile_.start();
  }
}

double PhaseClock::iteration_seconds() const { return monotonic_seconds() - iteration_start_; }

}  // namespace quartet
