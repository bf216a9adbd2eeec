#pragma once
// Rotary position embeddings as Hugging Face computes them: the inverse frequencies of a config
// (default, linear, dynamic NTK, llama3), their cos/sin at given positions, and the rotation of
// the first rotary_dim dims of each head, either in halves (Llama, NeoX: rotate_half) or in
// interleaved pairs (GPT-J: rotate_every_two).
#include <torch/types.h>

#include <cstdint>
#include <utility>

#include "quartet/model/model_config.hpp"

namespace quartet {

// [ceil(rotary_dim / 2)] float32 on the CPU. seq_len matters only for dynamic NTK scaling, which
// rescales the base once sequences outgrow max_positions (as transformers does for its
// largest position + 1; quartet passes the key length, an upper bound of it).
torch::Tensor rotary_inv_freq(const ModelConfig& config, int64_t seq_len);

// cos and sin [B, 1, T, 2 * inv_freq.size(0)] in `dtype` for position_ids [B, T] (computed in float32,
// then cast, as transformers does). interleaved: each frequency repeated twice in a row (GPT-J),
// else the two halves repeat the frequencies.
std::pair<torch::Tensor, torch::Tensor> rotary_cos_sin(const torch::Tensor& inv_freq,
                                                        const torch::Tensor& position_ids,
                                                        torch::ScalarType dtype, bool interleaved);

// x [B, H, T, D]; rotates x[..., :rotary_dim] with cos/sin from rotary_cos_sin.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           bool interleaved);

}  // namespace quartet
