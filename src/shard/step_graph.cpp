#include "quartet/shard/step_graph.hpp"

#include <torch/types.h>

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

// What a capture depends on: the phase's variant, every source's dtype and shape (or its
// absence), the rows taken.
using Key = std::vector<int64_t>;

Key key_of(int64_t variant, const std::vector<torch::Tensor>& sources, const torch::Tensor& index) {
  Key k{variant, index.numel()};
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
  Key key;                      // the shapes it was captured for
  std::vector<bool> fresh;      // the units without a gradient yet, before the micro-batch
  std::uint64_t version;        // the parameters' storage_version() at capture
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::vector<torch::Tensor> sources;  // the graph's copies of the phase's inputs
  int64_t copied_phase = -1;           // the phase whose inputs they hold
  torch::Tensor index;                 // the micro-batch's rows
  std::vector<torch::Tensor> outputs;  // {loss, statistics...} as the replays write them
  ShardedModel::GradientState after;   // the step's gradients as the replays leave them
};

// What a model's graphs share: the stream they are warmed up and captured on, and one memory
// pool (they replay in the order they were captured, one at a time, and each one's outputs are
// read before the next replays).
struct StepGraph::Shared {
  explicit Shared(c10::cuda::CUDAStream s) : stream(s) {}
  c10::cuda::CUDAStream stream;
  at::cuda::MempoolId_t pool{0, 0};
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
struct StepGraph::Shared {};

bool StepGraph::applies(const ShardedModel&) { return false; }

#endif

StepGraph::StepGraph(ShardedModel& model) : model_(model) {}

StepGraph::~StepGraph() = default;

void StepGraph::begin_phase(std::vector<torch::Tensor> sources, int64_t variant) {
  sources_ = std::move(sources);
  variant_ = variant;
  ++phase_;
}

std::vector<torch::Tensor> StepGraph::eager(const std::vector<torch::Tensor>& sources, const torch::Tensor& index,
                                            const MicroBatch& fn, int64_t micros) {
  auto out = fn(sources, index);
  QUARTET_CHECK(!out.empty() && out[0].defined(), "step graph: the micro-batch returned no loss");
  model_.backward(out[0] / static_cast<double>(micros));
  return detached(out);
}

std::vector<torch::Tensor> StepGraph::step(const torch::Tensor& index, const MicroBatch& fn, int64_t micros) {
#ifdef QUARTET_WITH_CUDA
  if (!applies(model_)) {
    captured_.clear();
    shared_.reset();
    return eager(sources_, index, fn, micros);
  }
  const Key key = key_of(variant_, sources_, index);
  if (!captured_.empty() && (captured_[0]->key != key || captured_[0]->version != model_.storage_version())) {
    captured_.clear();  // every graph of a model has the same shapes and version
    shared_.reset();    // and, with them gone, its pool goes too
  }
  const ShardedModel::GradientState before = model_.gradient_state();
  Captured* c = nullptr;
  for (auto& g : captured_)
    if (g->fresh == before.fresh) c = g.get();
  const auto dev = model_.device().index();
  const auto main = c10::cuda::getCurrentCUDAStream(dev);
  if (!shared_) shared_ = std::make_unique<Shared>(c10::cuda::getStreamFromPool(false, dev));
  if (!c) {
    // A new kind of micro-batch: it runs eagerly on the stream the next one is captured on.
    captured_.push_back(std::make_unique<Captured>());
    captured_.back()->key = key;
    captured_.back()->fresh = before.fresh;
    captured_.back()->version = model_.storage_version();
    std::vector<torch::Tensor> out;
    on_stream(main, shared_->stream, [&] { out = eager(sources_, index, fn, micros); });
    return out;
  }
  if (!c->graph) {
    for (const auto& s : sources_) c->sources.push_back(s.defined() ? torch::empty(s.sizes(), s.options()) : s);
    c->index = torch::empty({index.numel()}, index.options());
    on_stream(main, shared_->stream, [&] {
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local mode: NCCL's and the watchdog's threads may query their events meanwhile;
      // the autograd engine's thread launches onto this stream and is captured all the same.
      graph->capture_begin(shared_->pool, cudaStreamCaptureModeThreadLocal);
      c->outputs = eager(c->sources, c->index, fn, micros);  // recorded, not run
      graph->capture_end();
      if (shared_->pool.first == 0 && shared_->pool.second == 0) shared_->pool = graph->pool();
      c->graph = std::move(graph);
    });
    c->after = model_.gradient_state();
    model_.set_gradient_state(before);  // capture ran nothing: the gradients come with the replay
    ++captures_;
  }
  torch::NoGradGuard no_grad;
  if (c->copied_phase != phase_) {
    for (size_t i = 0; i < c->sources.size(); ++i)
      if (c->sources[i].defined()) c->sources[i].copy_(sources_[i]);
    c->copied_phase = phase_;
  }
  c->index.copy_(index);
  c->graph->replay();
  model_.set_gradient_state(c->after);
  ++replays_;
  return c->outputs;
#else
  return eager(sources_, index, fn, micros);
#endif
}

}  // namespace quartet
