#include "quartet/shard/step_graph.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "quartet/core/check.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace quartet {

namespace {

std::vector<torch::Tensor> detached(const std::vector<torch::Tensor>& out) {
  std::vector<torch::Tensor> d;
  for (const auto& t : out) d.push_back(t.defined() ? t.detach() : t);
  return d;
}

}  // namespace

#ifdef QUARTET_WITH_CUDA

namespace {

// What a capture depends on: every source's dtype and shape (or its absence), the rows taken.
using Key = std::vector<int64_t>;

Key key_of(const std::vector<torch::Tensor>& sources, const torch::Tensor& index) {
  Key k{index.numel()};
  for (const auto& s : sources) {
    k.push_back(s.defined() ? static_cast<int64_t>(s.scalar_type()) : -1);
    if (s.defined()) {
      k.push_back(s.dim());
      for (int64_t d : s.sizes()) k.push_back(d);
    }
  }
  return k;
}

}  // namespace

struct StepGraph::Captured {
  Captured(Key k, std::uint64_t v, c10::cuda::CUDAStream s) : key(std::move(k)), version(v), stream(s) {}
  Key key;
  std::uint64_t version;         // the parameters' storage_version() at capture
  c10::cuda::CUDAStream stream;  // captured (and warmed up) on this stream
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::vector<torch::Tensor> sources;  // the graph's copies of the phase's inputs
  torch::Tensor index;                 // and of the micro-batch's rows
  std::vector<torch::Tensor> outputs;  // {loss, statistics...} as the replays write them
  ShardedModel::KeptGradients kept;    // the step's gradients as the replays write them
};

namespace {

// fn() on `side`, ordered after everything queued on `main` so far and before what comes next.
template <typename Fn>
void on_stream(c10::cuda::CUDAStream main, c10::cuda::CUDAStream side, Fn&& fn) {
  at::cuda::CUDAEvent ready, done;
  ready.record(main);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    fn();
  }
  done.record(side);
  done.block(main);
}

}  // namespace

bool StepGraph::applies(const ShardedModel& model) { return model.graphable(); }

#else

struct StepGraph::Captured {};

bool StepGraph::applies(const ShardedModel&) { return false; }

#endif

StepGraph::StepGraph(ShardedModel& model) : model_(model) {}

StepGraph::~StepGraph() = default;

void StepGraph::begin_phase(std::vector<torch::Tensor> sources) {
  sources_ = std::move(sources);
  copied_ = false;
}

std::vector<torch::Tensor> StepGraph::eager(const std::vector<torch::Tensor>& sources, const torch::Tensor& index,
                                            const MicroBatch& fn) {
  auto out = fn(sources, index);
  QUARTET_CHECK(!out.empty() && out[0].defined(), "step graph: the micro-batch returned no loss");
  model_.backward(out[0]);
  return detached(out);
}

std::vector<torch::Tensor> StepGraph::step(const torch::Tensor& index, const MicroBatch& fn) {
#ifdef QUARTET_WITH_CUDA
  if (!applies(model_)) {
    captured_.reset();
    return eager(sources_, index, fn);
  }
  const Key key = key_of(sources_, index);
  if (captured_ && (captured_->key != key || captured_->version != model_.storage_version())) captured_.reset();
  const auto dev = model_.device().index();
  const auto main = c10::cuda::getCurrentCUDAStream(dev);
  if (!captured_) {
    // A new shape: this micro-batch runs eagerly on the stream the next one is captured on.
    captured_ = std::make_unique<Captured>(key, model_.storage_version(), c10::cuda::getStreamFromPool(false, dev));
    std::vector<torch::Tensor> out;
    on_stream(main, captured_->stream, [&] { out = eager(sources_, index, fn); });
    return out;
  }
  Captured& c = *captured_;
  if (!c.graph) {
    for (const auto& s : sources_) c.sources.push_back(s.defined() ? torch::empty(s.sizes(), s.options()) : s);
    c.index = torch::empty({index.numel()}, index.options());
    copied_ = false;
    on_stream(main, c.stream, [&] {
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local mode: NCCL's and the watchdog's threads may query their events meanwhile;
      // the autograd engine's thread launches onto this stream and is captured all the same.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      c.outputs = eager(c.sources, c.index, fn);  // recorded, not run
      graph->capture_end();
      c.graph = std::move(graph);
    });
    c.kept = model_.kept_gradients();
    model_.zero_grad();  // capture ran nothing: the step's gradients come with the first replay
    ++captures_;
  }
  torch::NoGradGuard no_grad;
  if (!copied_) {
    for (size_t i = 0; i < c.sources.size(); ++i)
      if (c.sources[i].defined()) c.sources[i].copy_(sources_[i]);
    copied_ = true;
  }
  c.index.copy_(index);
  c.graph->replay();
  model_.restore_kept_gradients(c.kept);
  ++replays_;
  return c.outputs;
#else
  return eager(sources_, index, fn);
#endif
}

}  // namespace quartet
