#include "quartet/model/packed_sequences.hpp"

#include <torch/types.h>

#include <algorithm>
#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

PackedSequences pack_rows(const torch::Tensor& ids, const torch::Tensor& mask, const std::vector<int64_t>& lengths,
                          torch::Tensor* grid) {
  QUARTET_CHECK(ids.dim() == 2 && mask.sizes() == ids.sizes() && static_cast<int64_t>(lengths.size()) == ids.size(0),
                "pack_rows: ids and mask must be [rows, width], with a length for each row");
  const auto dev = ids.device();
  const int64_t W = ids.size(1);
  PackedSequences p;
  std::vector<int32_t> cu{0};
  for (int64_t n : lengths) {
    QUARTET_CHECK(n >= 0 && n <= W, "pack_rows: a row of " + std::to_string(n) + " tokens in a batch " +
                                        std::to_string(W) + " wide");
    if (n == 0) continue;
    p.lengths.push_back(n);
    p.max_len = std::max(p.max_len, n);
    cu.push_back(cu.back() + static_cast<int32_t>(n));
  }
  // The real tokens in row-major order are the packed sequences (nonzero() reads its count
  // back: one wait for the device).
  auto flat = mask.reshape({-1}).ne(0).nonzero().reshape({-1});
  QUARTET_CHECK(flat.size(0) == cu.back(), "pack_rows: the mask holds " + std::to_string(flat.size(0)) +
                                               " tokens, the lengths " + std::to_string(cu.back()));
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong);
  p.ids = ids.reshape({-1}).index_select(0, flat).view({1, -1});
  p.cu_seqlens = torch::tensor(cu, torch::TensorOptions().dtype(torch::kInt)).to(dev);
  // Positions: the token's index minus its sequence's start.
  std::vector<int64_t> starts;
  starts.reserve(static_cast<size_t>(cu.back()));
  for (size_t k = 0; k + 1 < cu.size(); ++k) starts.insert(starts.end(), static_cast<size_t>(cu[k + 1] - cu[k]), cu[k]);
  auto start = torch::tensor(starts, long_opts).to(dev);
  p.positions = (torch::arange(cu.back(), long_opts.device(dev)) - start).view({1, -1});
  if (grid) *grid = flat;
  return p;
}

}  // namespace quartet
