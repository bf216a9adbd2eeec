#pragma once
// Which device this rank computes on. Called after the world is up and before any other CUDA
// or NCCL work: local rank -> cudaSetDevice, so every later CUDA call lands on the right GPU.
#include <torch/types.h>

#include <string>

#include "quartet/core/config.hpp"
#include "quartet/dist/dist_config.hpp"

namespace quartet {

// GPUs visible to this process (0 when quartet is built without CUDA or there are none).
int cuda_device_count();

// `want` is the deck's dist.device: auto | cuda | cpu. With CUDA, local rank r takes GPU
// r % count, so ranks of different groups may share a GPU (placement refuses sharing inside a
// group). Throws quartet::Error when cuda is wanted and there is no GPU.
torch::Device select_device(DeviceKind want, int local_rank);

// CPU ranks on one host share its cores: give each rank cores/local_size intra-op threads
// unless OMP_NUM_THREADS says otherwise.
void configure_cpu_threads(int local_size);

}  // namespace quartet
