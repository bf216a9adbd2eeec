#pragma once
// The seconds of each named part of a stage's step on this rank, and the device's peak memory in
// each (GPU only; 0 on the CPU), for run.h5's /timing and /memory (tune/stage.hpp).
#include <torch/types.h>

#include <string>
#include <vector>

namespace quartet {

class StageClock {
 public:
  StageClock(torch::Device device, std::vector<std::string> parts);
  void begin_step();           // zeroes the step's times, starts the first part
  void start();                // a part starts now
  void end(size_t part);       // ... and ends now (on a GPU: after the device's queued work)
  double step_seconds() const; // since begin_step
  const std::vector<std::string>& parts() const { return parts_; }
  const std::vector<double>& seconds() const { return seconds_; }
  const std::vector<double>& peak_bytes() const { return peaks_; }

 private:
  torch::Device device_;
  std::vector<std::string> parts_;
  std::vector<double> seconds_, peaks_;
  double step_start_ = 0, part_start_ = 0;
};

}  // namespace quartet
