#include "quartet/tune/dpo_batches.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/core/check.hpp"

namespace quartet {

std::vector<std::vector<int64_t>> strided_chunks(int64_t count, int64_t per_chunk, int rank, int ranks) {
  QUARTET_CHECK(per_chunk >= 1 && ranks >= 1 && rank >= 0 && rank < ranks, "strided_chunks: bad arguments");
  std::vector<std::vector<int64_t>> out;
  const int64_t chunks = (count + per_chunk - 1) / per_chunk;
  for (int64_t k = rank; k < chunks; k += ranks) {
    std::vector<int64_t> rows;
    for (int64_t i = k * per_chunk; i < std::min(count, (k + 1) * per_chunk); ++i) rows.push_back(i);
    out.push_back(std::move(rows));
  }
  return out;
}

StageMicroBatch pair_micro_batch(const PairDataset& pairs, const std::vector<int64_t>& rows, int64_t pad_id,
                                 int64_t max_width, const ReferenceLogps& reference, torch::Device device) {
  const PairBatch b = make_pair_batch(pairs.get(rows), pad_id, max_width);
  StageMicroBatch mb;
  for (const RolloutBatch* side : {&b.chosen, &b.rejected})
    for (const torch::Tensor& t : {side->sequences, side->attention_mask, side->action_mask})
      mb.tensors.push_back(t.to(device));
  mb.tensors.push_back(torch::tensor(rows, torch::kLong));  // the indices, on the host
  if (!reference.chosen.empty()) {
    std::vector<float> chosen, rejected;
    for (int64_t i : rows) {
      chosen.push_back(reference.chosen.at(static_cast<size_t>(i)));
      rejected.push_back(reference.rejected.at(static_cast<size_t>(i)));
    }
    mb.tensors.push_back(torch::tensor(chosen, torch::kFloat32).to(device));
    mb.tensors.push_back(torch::tensor(rejected, torch::kFloat32).to(device));
  }
  mb.units = static_cast<double>(rows.size());
  mb.tokens = (b.chosen.attention_mask.sum() + b.rejected.attention_mask.sum()).item<int64_t>();
  return mb;
}

PairBatch dpo_batch_of(const StageMicroBatch& mb) {
  QUARTET_CHECK(mb.tensors.size() >= 7, "dpo_batch_of: not a micro-batch of pairs");
  const auto& t = mb.tensors;
  PairBatch b;
  b.chosen = {t[0], t[1], t[2]};
  b.rejected = {t[3], t[4], t[5]};
  const auto index = t[6].contiguous();
  b.index.assign(index.data_ptr<int64_t>(), index.data_ptr<int64_t>() + index.numel());
  b.margin = torch::zeros({index.numel()}, torch::kFloat32);
  return b;
}

std::pair<torch::Tensor, torch::Tensor> reference_of(const StageMicroBatch& mb) {
  if (mb.tensors.size() < 9) return {};
  return {mb.tensors[7], mb.tensors[8]};
}

void idle_scoring(ShardedModel& model, const SamplingView& view) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
  (void)score_logprobs(model, {torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts), torch::ones({1, 1}, opts)}, 1,
                       view);
}

}  // namespace quartet
