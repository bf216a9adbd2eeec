#include "quartet/rl/overlong.hpp"

#include <torch/types.h>

#include "quartet/core/check.hpp"

namespace quartet {

torch::Tensor truncated_rows(const RolloutBatch& b, const std::vector<int64_t>& stop_ids, int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  const int64_t P = b.prompt_len(), A = b.actions();
  auto lengths = b.action_mask.ne(0).sum(1);  // [B]
  auto full = lengths.ge(max_new_tokens);
  // The last generated token of each row (a row without any reads position 0, and is not full).
  auto last_pos = (lengths - 1).clamp(0, std::max<int64_t>(A - 1, 0)) + P;
  auto last = b.sequences.gather(1, last_pos.unsqueeze(1)).squeeze(1);
  auto stopped = torch::zeros_like(full);
  for (int64_t id : stop_ids) stopped = stopped | last.eq(id);
  return full & stopped.logical_not();
}

torch::Tensor overlong_penalty(const torch::Tensor& lengths, int64_t max_new_tokens, int64_t buffer, double factor) {
  QUARTET_CHECK(buffer > 0 && buffer < max_new_tokens,
                "overlong_penalty: the buffer must be in 1 .. max_new_tokens - 1 (" + std::to_string(max_new_tokens - 1) +
                    "), got " + std::to_string(buffer));
  const double expected = static_cast<double>(max_new_tokens - buffer);
  auto over = (lengths.to(torch::kFloat64) - expected) / static_cast<double>(buffer);
  return (over.clamp(0.0, 1.0) * -factor).to(torch::kFloat32);
}

}  // namespace quartet
