#include "quartet/tune/stage_clock.hpp"

#include <algorithm>

#include "quartet/dist/device_memory.hpp"
#include "quartet/engine/phase_clock.hpp"

namespace quartet {

StageClock::StageClock(torch::Device device, std::vector<std::string> parts)
    : device_(device), parts_(std::move(parts)), seconds_(parts_.size(), 0.0), peaks_(parts_.size(), 0.0) {}

void StageClock::begin_step() {
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
  std::fill(peaks_.begin(), peaks_.end(), 0.0);
  if (device_.is_cuda()) reset_peak_memory(device_);
  step_start_ = monotonic_seconds();
  start();
}

void StageClock::start() { part_start_ = monotonic_seconds(); }

void StageClock::end(size_t part) {
  if (device_.is_cuda()) {
    synchronize_device(device_);
    peaks_[part] = std::max(peaks_[part], static_cast<double>(device_memory(device_).peak_allocated));
    reset_peak_memory(device_);
  }
  seconds_[part] += monotonic_seconds() - part_start_;
}

double StageClock::step_seconds() const { return monotonic_seconds() - step_start_; }

}  // namespace quartet
