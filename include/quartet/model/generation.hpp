#pragma once
// Sampling from a causal LM with a KV cache: the prompt in one forward pass, then one token per
// step for every sequence of the batch until max_new_tokens or a stop token.
#include <cstdint>
#include <utility>
#include <vector>

#include "quartet/model/transformer.hpp"

namespace quartet {

struct SamplingParams {
  double temperature = 1.0;   // 0 = greedy
  int64_t top_k = 0;          // 0 = off
  double top_p = 1.0;         // 1 = off
  int64_t max_new_tokens = 16;
  std::vector<int64_t> stop_ids;  // a sequence ends after emitting one of these
  int64_t pad_id = 0;             // fills the steps after a sequence ended
  uint64_t seed = 1;
  // Only ids below this are sampled (0 = every id of the model's vocabulary): a model whose
  // vocabulary is larger than its tokenizer's (a random model of a real size, or an embedding
  // padded to a multiple of 64) never emits an id the tokenizer cannot decode.
  int64_t vocab_limit = 0;
};

struct Generation {
  torch::Tensor tokens;          // [B, T + N]: the left-padded prompt, then the new tokens
  torch::Tensor attention_mask;  // [B, T + N]: 1 for prompt and generated tokens up to the stop
  torch::Tensor new_lengths;     // [B]: generated tokens per sequence, the stop token included
};

// Token lists as one left-padded batch: ids [B, T] (pad_id in the padding) and mask [B, T]
// (1 for tokens), T the longest list (at least 1).
std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& seqs, int64_t pad_id);

// prompt [B, T] left-padded, prompt_mask [B, T]. Deterministic for a given seed and device.
Generation generate(Transformer& model, const torch::Tensor& prompt,
                    const torch::Tensor& prompt_mask, const SamplingParams& params);

}  // namespace quartet
