#include "quartet/tune/dpo_reference.hpp"

#include <torch/types.h>

#include "quartet/dist/watched_mpi.hpp"
#include "quartet/tune/pair_scoring.hpp"

namespace quartet {

ReferenceLogps reference_logps(RoleModel* reference, const PairDataset& pairs, int64_t count,
                               const PairScoring& s, MPI_Comm world) {
  // chosen log-probs, then rejected ones: zeros but for the pairs this rank scores
  std::vector<double> both(static_cast<size_t>(2 * count), 0.0);
  if (reference) {
    torch::NoGradGuard no_grad;
    ShardedModel& model = *reference->model;
    Collectives& group = model.group();
    const auto chunks = strided_chunks(count, s.pairs_per_pass, group.rank(), group.size());
    const int64_t mine = static_cast<int64_t>(chunks.size()), turns = group_max(group, mine);
    for (int64_t k = 0; k < turns; ++k) {
      if (k >= mine) {
        idle_scoring(model, s.view);
        continue;
      }
      const std::vector<int64_t>& rows = chunks[static_cast<size_t>(k)];
      const PairBatch b = make_pair_batch(pairs.get(rows), s.pad_id, s.max_width);
      const PairValues v = score_pair_logps(model, b, 2 * static_cast<int64_t>(rows.size()), s.view, s.kind);
      const auto chosen = v.chosen.to(torch::kCPU).to(torch::kFloat64).contiguous();
      const auto rejected = v.rejected.to(torch::kCPU).to(torch::kFloat64).contiguous();
      for (size_t j = 0; j < rows.size(); ++j) {
        both[static_cast<size_t>(rows[j])] = chosen.data_ptr<double>()[j];
        both[static_cast<size_t>(count + rows[j])] = rejected.data_ptr<double>()[j];
      }
    }
  }
  watched::allreduce(MPI_IN_PLACE, both.data(), static_cast<int>(both.size()), MPI_DOUBLE, MPI_SUM, world,
                     "the reference's log-probs of every pair");
  ReferenceLogps out;
  // float32 to double and back is exact: the numbers are the reference's float32 ones.
  for (int64_t i = 0; i < count; ++i) {
    out.chosen.push_back(static_cast<float>(both[static_cast<size_t>(i)]));
    out.rejected.push_back(static_cast<float>(both[static_cast<size_t>(count + i)]));
  }
  return out;
}

}  // namespace quartet
