#include "quartet/dist/side_stream.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace quartet {

void Fence::wait() {
#ifdef QUARTET_WITH_CUDA
  if (event_) static_cast<at::cuda::CUDAEvent*>(event_.get())->block(c10::cuda::getCurrentCUDAStream(device_));
#endif
  event_.reset();
}

SideStream::SideStream(torch::Device device) {
#ifdef QUARTET_WITH_CUDA
  if (!device.is_cuda()) return;
  device_ = device.index();
  stream_ = std::make_shared<c10::cuda::CUDAStream>(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_));
  compute_ = std::make_shared<c10::cuda::CUDAStream>(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_));
#else
  (void)device;
#endif
}

Fence SideStream::run(const std::function<void()>& f) {
  Fence done;
#ifdef QUARTET_WITH_CUDA
  if (stream_) {
    const auto& side = *static_cast<c10::cuda::CUDAStream*>(stream_.get());
    at::cuda::CUDAEvent queued;
    queued.record(c10::cuda::getCurrentCUDAStream(device_));
    queued.block(side);
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      f();
    }
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(side);
    done.event_ = event;
    done.device_ = device_;
    return done;
  }
#endif
  f();
  return done;
}

void SideStream::prioritized(const std::function<void()>& work) {
#ifdef QUARTET_WITH_CUDA
  if (compute_) {
    const auto& compute = *static_cast<c10::cuda::CUDAStream*>(compute_.get());
    const auto caller = c10::cuda::getCurrentCUDAStream(device_);
    at::cuda::CUDAEvent queued, done;
    queued.record(caller);
    queued.block(compute);
    {
      const c10::cuda::CUDAStreamGuard guard(compute);
      work();
    }
    done.record(compute);
    done.block(caller);
    return;
  }
#endif
  work();
}

}  // namespace quartet
