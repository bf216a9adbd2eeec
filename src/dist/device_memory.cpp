#include "quartet/dist/device_memory.hpp"

#include <torch/types.h>

#include "quartet/core/check.hpp"

#ifdef QUARTET_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace quartet {

namespace {
#ifdef QUARTET_WITH_CUDA
// The caching allocator refuses statistics for a device it has not allocated on yet.
void touch_allocator(torch::Device device) {
  (void)torch::empty({1}, torch::TensorOptions().dtype(torch::kByte).device(device));
}
#endif
}  // namespace

DeviceMemory device_memory(torch::Device device) {
  DeviceMemory m;
#ifdef QUARTET_WITH_CUDA
  if (device.is_cuda()) {
    touch_allocator(device);
    using c10::CachingDeviceAllocator::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto all = static_cast<size_t>(StatType::AGGREGATE);
    m.allocated = stats.allocated_bytes[all].current;
    m.peak_allocated = stats.allocated_bytes[all].peak;
    m.reserved = stats.reserved_bytes[all].current;
    m.peak_reserved = stats.reserved_bytes[all].peak;
    c10::cuda::CUDAGuard guard(device);
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    m.total = static_cast<std::int64_t>(total);
  }
#else
  (void)device;
#endif
  return m;
}

void reset_peak_memory(torch::Device device) {
#ifdef QUARTET_WITH_CUDA
  if (device.is_cuda()) {
    touch_allocator(device);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#else
  (void)device;
#endif
}

void synchronize_device(torch::Device device) {
#ifdef QUARTET_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
#else
  (void)device;
#endif
}

}  // namespace quartet
