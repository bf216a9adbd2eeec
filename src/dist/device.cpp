#include "quartet/dist/device.hpp"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <thread>

#ifdef QUARTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/dist/dist_config.hpp"

namespace quartet {

int cuda_device_count() {
#ifdef QUARTET_WITH_CUDA
  int n = 0;
  // No GPU (or no driver) is a normal CPU machine, not an error.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

torch::Device select_device(DeviceKind want, int local_rank) {
  int count = cuda_device_count();
  if (want == DeviceKind::cpu || (want == DeviceKind::automatic && count == 0)) return torch::Device(torch::kCPU);
  QUARTET_CHECK(count > 0, "dist.device = cuda, but this rank sees no GPU"
#ifndef QUARTET_WITH_CUDA
                           " (quartet was built with a LibTorch without CUDA)"
#endif
  );
#ifdef QUARTET_WITH_CUDA
  int index = local_rank % count;
  CUDA_CHECK(cudaSetDevice(index));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#else
  (void)local_rank;
  return torch::Device(torch::kCPU);
#endif
}

void configure_cpu_threads(int local_size) {
  if (std::getenv("OMP_NUM_THREADS")) return;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, cores / std::max(1, local_size)));
}

}  // namespace quartet
