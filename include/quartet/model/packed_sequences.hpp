#pragma once
// Sequences packed back to back without padding, for a forward pass whose cost follows the
// tokens, not the longest row times the rows (Transformer::packed_hidden_states). Each
// sequence attends causally within itself only: ATen's variable-length flash attention on
// CUDA in half precision (cu_seqlens, as FlashAttention's varlen API takes them), else one
// attention per sequence. Positions restart at 0 for each sequence, as a left-padded row's
// count its real tokens, so a sequence's outputs are those of its padded row, to rounding.
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace quartet {

struct PackedSequences {
  torch::Tensor ids;         // [1, N] int64: every sequence's tokens, one after the other
  torch::Tensor positions;   // [1, N] int64: each token's position within its sequence
  torch::Tensor cu_seqlens;  // [n + 1] int32 on the ids' device: sequence k is [cu[k], cu[k+1])
  std::vector<int64_t> lengths;  // the n lengths, on the host
  int64_t max_len = 0;           // the longest
  int64_t tokens() const { return ids.defined() ? ids.size(1) : 0; }
  int64_t sequences() const { return static_cast<int64_t>(lengths.size()); }
};

// The rows of a padded batch packed: row r's real tokens (mask != 0) in order, lengths[r] of
// them (host: the rows' mask sums). Padding anywhere in a row is left out, and a real token
// sees the real tokens before it in its row, as under the mask. Rows of no tokens are left
// out. `grid` ([N] int64), where given: the flat index r * W + column of each packed token in
// the padded [B, W] batch.
PackedSequences pack_rows(const torch::Tensor& ids, const torch::Tensor& mask, const std::vector<int64_t>& lengths,
                          torch::Tensor* grid = nullptr);

}  // namespace quartet
