#pragma once
// Device time of small kernels as the decoding step runs them, for the benchmarks: captured into
// a CUDA graph and replayed. An eager loop would time the host's launches instead (10-20 us for
// an ATen operation, more than many of these kernels take).
#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <functional>

namespace quartet::bench {

// Microseconds per call: f(i) for i in [0, calls) (i may pick a buffer) captured into one graph
// on a side stream, after 10 warm-up calls there (workspaces, handles); one replay to warm up,
// then one timed by events.
inline double graph_us(const std::function<void(int)>& f, int calls) {
  auto stream = c10::cuda::getStreamFromPool();
  const c10::cuda::CUDAStreamGuard guard(stream);
  for (int i = 0; i < 10; ++i) f(i);
  stream.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (int i = 0; i < calls; ++i) f(i);
  graph.capture_end();
  graph.replay();
  stream.synchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, stream.stream());
  graph.replay();
  cudaEventRecord(b, stream.stream());
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e3 / calls;
}

}  // namespace quartet::bench
#endif
