#pragma once
// Linear layers whose weights lie back to back in one storage (Llama's q, k and v projections,
// its gate and up projections: neighbours in a sharded unit's flat buffer or a packed module)
// as one product. Training at a few thousand tokens a pass is bound by the host's launches as
// much as by the device: one product instead of three forward, two instead of six backward, and
// no autograd sums of the input's gradients, is a quarter of a Llama block's kernels (and its
// autograd nodes) fewer. Megatron fuses the same way (linear_qkv, linear_fc1).
#include <torch/types.h>

#include <initializer_list>
#include <vector>

namespace quartet {

// The matrices `parts` (each [rows_i, cols]) as one [sum rows_i, cols] matrix when they lie
// back to back in one storage, as packed and sharded parameters do; else undefined. Only for
// work without gradients: autograd would credit the whole matrix's gradient to the first part
// (packed_linear is the differentiable way).
torch::Tensor adjacent_rows(std::initializer_list<torch::Tensor> parts);

// Whether the models multiply this way where they can (on unless the deck sets
// kernels.packed_products = false, or set_packed_products(false)): a switch for benchmarks.
bool packed_products_enabled();
void set_packed_products(bool on);

// x [.., K] times the weights (2 or 3, [n_i, K], back to back: adjacent_rows) with gradients
// for x and every weight. split: one output per weight ([.., n_i], views of the one product),
// else the product [.., sum n_i] itself. Backward: one product for x's gradient (the parts'
// gradients joined first, one copy, when split) and one for the weights', whose gradients are
// row ranges of it. The sums run in another order than three separate products and their adds,
// so results agree with them to rounding. Empty when the weights are not back to back.
std::vector<torch::Tensor> packed_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights, bool split);

}  // namespace quartet
