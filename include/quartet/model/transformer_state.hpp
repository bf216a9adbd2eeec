#pragma once
// What a Transformer (transformer.hpp) holds besides its config and head: the base model, the
// head's Linear, the rotary tables and how blocks are run. Shared by the files that implement
// TransformerImpl (construction, the forward pass, the decoding step, HF load and save).
#include <torch/types.h>

#include <cstdint>

#include "quartet/model/base_model.hpp"
#include "quartet/model/forward_step.hpp"
#include "quartet/model/layers.hpp"
#include "quartet/model/transformer.hpp"

namespace quartet {

struct TransformerImpl::Impl {
  layers::Base base{nullptr};
  layers::Dense head{nullptr};    // lm_head / embed_out / score / classifier
  torch::Tensor inv_freq;         // float32, CPU: the master copy
  torch::Tensor inv_freq_dev;     // the copy on the device of the last forward
  torch::Tensor swap_halves_dev;  // decode_step's half-swapping index (Step::swap_halves), there too
  bool checkpointing = false;
  BlockRunner runner;

  // inv_freq on `dev`, copied there when the last pass ran elsewhere.
  const torch::Tensor& inv_freq_on(torch::Device dev);
  // The token embeddings of ids at positions pos [B, T]: GPT-2's learned positions added, else
  // step's rotary tables set (dynamic scaling from a pass of `length` tokens).
  torch::Tensor embed_at(layers::Step& step, const torch::Tensor& ids, const torch::Tensor& pos, int64_t length,
                         const ModelConfig& c);
  // The blocks in order on x: through the runner when one is installed, else checkpointed
  // (recompute) or directly.
  torch::Tensor run_blocks(const layers::Step& step, torch::Tensor x, int64_t num_layers, bool recompute);
  // A packed pass's blocks (packed_sequences.hpp): sets the step's packed fields, rotary tables
  // and carry, and returns the hidden states [1, N, hidden] before the final norm.
  torch::Tensor packed_blocks(layers::Step& step, const PackedSequences& packed, const ModelConfig& c);
  // A decoding step's blocks on tokens ids [B] at positions [B] (rotary tables from inv_freq,
  // undefined for learned positions), the step's cache and biases set: final-normed hidden
  // states [B, 1, hidden].
  torch::Tensor decode_hidden(layers::Step& step, const torch::Tensor& ids, const torch::Tensor& positions,
                              const torch::Tensor& inv_freq, const ModelConfig& c);
};

}  // namespace quartet
