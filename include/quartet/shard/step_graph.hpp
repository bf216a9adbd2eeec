#pragma once
// A training micro-batch of a one-rank ShardedModel (forward, loss and backward) as one CUDA
// graph, replayed for the later ones: what PyTorch's make_graphed_callables and
// Megatron's --enable-cuda-graph do, here for the whole pass. At 8 x 256 tokens an 886M Llama
// block's backward is about 35 kernels of 10-60 us, which the autograd engine issues barely
// faster than the device runs them (docs/sharding.md); a replay issues the pass
// at once.
//
// A replay repeats what capture recorded: the same shapes, the same addresses. So the phase's
// inputs (rollouts, old log-probs, advantages, ...) are copied once per phase into the graph's
// own tensors and each micro-batch's rows into its own index; the parameters must stay where
// they are (ShardedModel::storage_version()). A step's first micro-batch and its later ones
// (which add to the gradients the first one wrote) are two graphs, told apart by the
// gradients' state before them. A new shape or moved parameters drop the graphs. A graph's
// life: the first micro-batch of its kind runs eagerly on the capture stream (cuBLAS and cuDNN
// set up their workspaces and plans for that stream outside capture); the next one is captured
// and then replayed, and so is every later one.
//
// The graphs' memory (the pass's intermediates and the step's gradients; a model's graphs
// share one pool) stays reserved between phases; the memory plan counts it ("train graph",
// memory_plan.hpp).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "quartet/shard/sharded_model.hpp"

namespace quartet {

class StepGraph {
 public:
  // The micro-batch: from the phase's sources (the caller's tensors, or the graph's copies of
  // them) and the rows to take, returns {loss, statistics...}: the loss with its autograd graph
  // (the step runs model.backward on it), the statistics as device tensors (undefined where
  // there are none). It may depend on nothing else that changes between calls: host values it
  // reads are baked into the graph.
  using MicroBatch = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& sources,
                                                              const torch::Tensor& index)>;

  explicit StepGraph(ShardedModel& model);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether this build and model can graph a micro-batch (ShardedModel::graphable()).
  static bool applies(const ShardedModel& model);

  // The phase's inputs (undefined entries allowed), read by the steps until the next call.
  // `variant` names what else the micro-batch function decides on the host for this phase
  // (a graph replays the choice it was captured with): graphs of another variant are dropped.
  void begin_phase(std::vector<torch::Tensor> sources, int64_t variant = 0);
  // One micro-batch of an optimizer step of `micros` (after model.zero_grad() for the first):
  // forward, loss, and model.backward(loss / micros), as the eager loop runs it. Returns {loss,
  // statistics...} detached; after a replay they are the graph's tensors, rewritten by its next
  // replay, so read them (on the stream) before that.
  std::vector<torch::Tensor> step(const torch::Tensor& index, const MicroBatch& fn, int64_t micros);

  int captures() const { return captures_; }
  int replays() const { return replays_; }

 private:
  struct Captured;
  struct Shared;
  std::vector<torch::Tensor> eager(const std::vector<torch::Tensor>& sources, const torch::Tensor& index,
                                   const MicroBatch& fn, int64_t micros);

  ShardedModel& model_;
  std::vector<torch::Tensor> sources_;
  int64_t variant_ = 0;
  int64_t phase_ = 0;  // begin_phase() calls: a graph copies the sources once per phase
  std::vector<std::unique_ptr<Captured>> captured_;  // one per gradient state before the micro-batch
  std::unique_ptr<Shared> shared_;                   // the capture stream and memory pool
  int captures_ = 0, replays_ = 0;
};

}  // namespace quartet
