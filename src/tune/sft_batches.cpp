#include "quartet/tune/sft_batches.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/core/kernel_switch.hpp"
#include "quartet/engine/token_logprobs.hpp"

namespace quartet {

namespace {

SftMicroBatch pad_rows(const std::vector<const SftExample*>& rows, int64_t pad_id, torch::Device device) {
  const int64_t m = static_cast<int64_t>(rows.size());
  int64_t T = 0;
  for (const SftExample* e : rows) T = std::max<int64_t>(T, static_cast<int64_t>(e->ids.size()));
  auto ids = torch::full({m, T}, pad_id, torch::kLong);
  auto attention = torch::zeros({m, T}, torch::kLong);
  auto targets = torch::zeros({m, T - 1}, torch::kFloat32);
  auto id = ids.accessor<int64_t, 2>();
  auto at = attention.accessor<int64_t, 2>();
  auto tg = targets.accessor<float, 2>();
  SftMicroBatch mb;
  for (int64_t r = 0; r < m; ++r) {
    const SftExample& e = *rows[static_cast<size_t>(r)];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      id[r][static_cast<int64_t>(t)] = e.ids[t];
      at[r][static_cast<int64_t>(t)] = 1;
      if (t > 0 && e.targets[t]) tg[r][static_cast<int64_t>(t) - 1] = 1.0f;
    }
    mb.target_tokens += e.target_count();
    mb.tokens += static_cast<int64_t>(e.ids.size());
  }
  mb.ids = ids.to(device);
  mb.attention = attention.to(device);
  mb.targets = targets.to(device);
  return mb;
}

}  // namespace

std::vector<SftMicroBatch> bucket_examples(const std::vector<const SftExample*>& rows, int64_t max_rows,
                                           int64_t max_tokens, int64_t pad_id, torch::Device device) {
  std::vector<const SftExample*> sorted = rows;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const SftExample* a, const SftExample* b) { return a->ids.size() > b->ids.size(); });
  std::vector<SftMicroBatch> out;
  std::vector<const SftExample*> current;
  for (const SftExample* e : sorted) {
    // Sorted longest first: the micro-batch's width is its first row's.
    const int64_t width = current.empty() ? static_cast<int64_t>(e->ids.size())
                                          : static_cast<int64_t>(current.front()->ids.size());
    const int64_t n = static_cast<int64_t>(current.size()) + 1;
    const bool full = max_tokens > 0 ? n * width > max_tokens : n > max_rows;
    if (!current.empty() && full) {
      out.push_back(pad_rows(current, pad_id, device));
      current.clear();
    }
    current.push_back(e);
  }
  if (!current.empty()) out.push_back(pad_rows(current, pad_id, device));
  return out;
}

SftLoss sft_loss(ShardedModel& model, const SftMicroBatch& mb) {
  // Every row is tokens then padding: causality alone hides the padding (PaddingLayout).
  const PaddingLayout padding =
      kernels_in_use().unmasked_attention ? PaddingLayout::trailing : PaddingLayout::anywhere;
  const int64_t T = mb.ids.size(1);
  auto logits = model.forward(mb.ids, mb.attention, /*head_from=*/0, padding).narrow(1, 0, T - 1);
  auto next = mb.ids.narrow(1, 1, T - 1);
  auto logp = token_logprobs(logits, next);
  SftLoss out;
  out.nll_sum = -(logp * mb.targets).sum();
  torch::NoGradGuard no_grad;
  out.correct = (logits.argmax(-1).eq(next).to(torch::kFloat32) * mb.targets).sum();
  return out;
}

}  // namespace quartet
