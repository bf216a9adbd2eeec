#pragma once
// Device memory as the CUDA caching allocator sees it, for the measured-peak reports that are
// compared with the memory plan. On the CPU every figure is 0 (not measured).
#include <torch/types.h>

#include <cstdint>

namespace quartet {

struct DeviceMemory {
  std::int64_t allocated = 0;       // bytes in live tensors now
  std::int64_t peak_allocated = 0;  // highest `allocated` since the last reset_peak_memory
  std::int64_t reserved = 0;        // bytes the allocator holds from the driver (>= allocated)
  std::int64_t peak_reserved = 0;
  std::int64_t total = 0;           // the device's memory (cudaMemGetInfo)
};

DeviceMemory device_memory(torch::Device device);
void reset_peak_memory(torch::Device device);
// Waits for the device's queued work (the CPU: returns at once).
void synchronize_device(torch::Device device);

}  // namespace quartet
