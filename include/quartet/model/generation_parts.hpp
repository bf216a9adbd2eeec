#pragma once
// What the two decoders share (generation.cpp: every row at once over one contiguous cache;
// paged_generation.cpp: continuous batching over a paged cache): the sampler and its seeded
// generator, the argument checks, the side stream they run on and the CUDA graphs of their steps.
#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "quartet/model/generation.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace quartet {

// The next token of every row from logits [B, V], with HF's warpers in HF's order:
// temperature, then top-k, then top-p; then a draw from the remaining distribution.
torch::Tensor pick(torch::Tensor logits, const SamplingParams& p, at::Generator& gen);

// The stop ids that min_new_tokens holds back (each once, those below vocab_size) as int64 with
// long_opts; undefined when there are none or min_new_tokens is 0.
torch::Tensor banned_stop_ids(const SamplingParams& params, int64_t vocab_size, const torch::TensorOptions& long_opts);

// A generator of `dev`, seeded here, so that runs repeat without touching the global RNG state.
at::Generator seeded_generator(torch::Device dev, uint64_t seed);

// generate()'s arguments, with errors that say which one is wrong.
void check_sampling(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                    const SamplingParams& params);

// While it lives, the work of `dev` (a CUDA device; nothing elsewhere) goes to generation's side
// stream, which first waits for the caller's stream: graphs cannot be captured on the default
// stream, and a graph's eager warm-up should run on the stream it is captured on. finish() makes
// the caller's stream wait for the side stream's work, and marks `handed_back` (tensors made on
// the side stream and read next on the caller's) so that the allocator does not give their
// memory to the side stream before those reads are done.
class SideStream {
 public:
  explicit SideStream(torch::Device dev);
  void finish(const std::vector<torch::Tensor>& handed_back = {});

 private:
  torch::Device dev_;
#ifdef QUARTET_WITH_CUDA
  std::unique_ptr<c10::cuda::CUDAStreamGuard> guard_;
#endif
};

// A device tensor on its way to the host without the host waiting (the decoders' checks): the
// copy into pinned memory is queued on the current stream when made; wait() blocks until it has
// landed and gives the host copy. On the CPU a plain copy.
class HostCopy {
 public:
  explicit HostCopy(const torch::Tensor& from);
  const torch::Tensor& wait();

 private:
  torch::Tensor host_;
#ifdef QUARTET_WITH_CUDA
  at::cuda::CUDAEvent landed_;
#endif
};

// How decoding steps run: with graphs on (CUDA), as a CUDA graph replay per key (the step's
// shapes: rows and attention span), captured on first use after one eager step (which
// initialises cuBLAS workspaces and the like outside capture); else eagerly.
class StepGraphs {
 public:
  explicit StepGraphs(bool use_graphs) : use_(use_graphs) {}
  // Runs one step of `body` (device work only, the same shapes for a key); true when replayed.
  bool run(std::pair<int64_t, int64_t> key, const std::function<void()>& body, at::Generator& gen,
           GenerationStats& stats);

 private:
  bool use_ = false;
#ifdef QUARTET_WITH_CUDA
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
  at::cuda::MempoolId_t pool_{0, 0};
#endif
};

}  // namespace quartet
