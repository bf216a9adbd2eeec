#pragma once
// Activation checkpointing: a block's activations are dropped after the forward pass and
// recomputed, with grad, during the backward pass, trading one extra block forward for the
// memory of every intermediate tensor of the block.
#include <torch/types.h>

#include <functional>
#include <vector>

namespace quartet {

// Returns fn(input) computed without a graph; backward re-runs fn(input) with grad and
// back-propagates into `input` and into `params` (the tensors fn reads that may need
// gradients, i.e. the block's parameters). fn must give the same result when re-run (no
// dropout) and must stay valid until backward has run; it is kept alive by the graph.
torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn,
                         const torch::Tensor& input, const std::vector<torch::Tensor>& params);

}  // namespace quartet
