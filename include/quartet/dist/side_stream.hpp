#pragma once
// A second stream on the rank's GPU, for work that may run beside the compute stream: one
// model's optimizer step while another model computes. Ordering is by events only, as llm.c
// orders its reduce-scatter: the side work starts after everything queued so far on the current
// stream, and the current stream waits for it only where a Fence says so. Without CUDA (or on
// the CPU) the work runs in place and a Fence is empty.
#include <torch/types.h>

#include <functional>
#include <memory>

namespace quartet {

// The end of some side-stream work. wait() makes the current stream wait for it (the host does
// not block); an empty Fence waits for nothing.
class Fence {
 public:
  Fence() = default;
  bool pending() const { return event_ != nullptr; }
  void wait();  // then empty

 private:
  friend class SideStream;
  std::shared_ptr<void> event_;  // at::cuda::CUDAEvent, type-erased so this header needs no CUDA
  int device_ = -1;
};

class SideStream {
 public:
  // On a CUDA device: a stream from LibTorch's pool. Elsewhere: none, and run() runs in place.
  explicit SideStream(torch::Device device);
  bool active() const { return stream_ != nullptr; }
  // Runs f with the side stream current, ordered after the work queued on the current stream;
  // returns the Fence of what f queued. Tensors that f reads and the caller frees afterwards
  // must stay alive until the Fence has been waited for (the caller's stream reuses them).
  Fence run(const std::function<void()>& f);
  // Runs `work` with a high-priority compute stream current (ordered after the current stream's
  // work; the current stream then waits for it). Where both streams' kernels wait for free
  // multiprocessors, the block scheduler takes the compute stream's first, so side work fills
  // what the compute stream leaves idle instead of delaying it. `work` must wait for its Fences.
  void prioritized(const std::function<void()>& work);

 private:
  std::shared_ptr<void> stream_;   // c10::cuda::CUDAStream, low priority
  std::shared_ptr<void> compute_;  // c10::cuda::CUDAStream, high priority
  int device_ = -1;
};

}  // namespace quartet
