#include "quartet/engine/packed_rollouts.hpp"

#include <torch/types.h>

#include <string>
#include <utility>

#include "quartet/core/check.hpp"

namespace quartet {

std::vector<int64_t> row_lengths(const RolloutBatch& batch) {
  auto n = batch.attention_mask.ne(0).sum(1).to(torch::kCPU, torch::kLong).contiguous();
  return std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel());
}

PackedRollouts pack_rollouts(const RolloutBatch& batch, const std::vector<int64_t>& lengths) {
  const int64_t B = batch.rows(), W = batch.sequences.size(1), P = batch.prompt_len(), A = batch.actions();
  const auto dev = batch.sequences.device();
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(dev);
  PackedRollouts p;
  p.rows = B;
  p.actions = A;
  torch::Tensor grid;
  p.seqs = pack_rows(batch.sequences, batch.attention_mask, lengths, &grid);
  // Where each cell of the padded batch went in the packing (-1: padding).
  auto packed_of = torch::full({B * W}, -1, long_opts);
  packed_of.index_put_({grid}, torch::arange(p.seqs.tokens(), long_opts));
  p.action_cell = batch.action_mask.reshape({-1}).ne(0).nonzero().reshape({-1});
  auto row = p.action_cell.div(A, "floor"), column = p.action_cell.remainder(A) + P;
  p.action_ids = batch.sequences.reshape({-1}).index_select(0, row * W + column);
  p.predict_at = packed_of.index_select(0, row * W + column - 1);
  auto action_at = packed_of.index_select(0, row * W + column);
  // An action must be a real token after a real one (the prompt's last token, or an action).
  const bool real = p.predict_at.numel() == 0 ||
                    torch::stack({p.predict_at.min(), action_at.min()}).min().item<int64_t>() >= 0;
  QUARTET_CHECK(real, "pack_rollouts: an action (action_mask 1) sits on padding (attention_mask 0), or after it");
  p.last_at = p.seqs.cu_seqlens.narrow(0, 1, p.seqs.sequences()).to(torch::kLong) - 1;
  return p;
}

torch::Tensor unpack_actions(const torch::Tensor& per_action, const PackedRollouts& packed) {
  auto values = per_action.reshape({-1});
  auto grid = torch::zeros({packed.rows * packed.actions}, values.options());
  return grid.index_put({packed.action_cell}, values).view({packed.rows, packed.actions});
}

std::vector<std::pair<int64_t, int64_t>> token_passes(const std::vector<int64_t>& lengths, int64_t budget) {
  QUARTET_CHECK(budget > 0, "token_passes: the token budget must be positive");
  std::vector<std::pair<int64_t, int64_t>> passes;
  const auto n = static_cast<int64_t>(lengths.size());
  int64_t begin = 0, tokens = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len = lengths[static_cast<size_t>(r)];
    if (r > begin && tokens + len > budget) {
      passes.emplace_back(begin, r);
      begin = r;
      tokens = 0;
    }
    tokens += len;
  }
  if (n > begin) passes.emplace_back(begin, n);
  return passes;
}

}  // namespace quartet
