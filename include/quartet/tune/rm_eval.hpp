#pragma once
// The held-out measurement of `quartet rm` (rm.heldout; docs/rm.md), every rank at once. Each
// rank of the reward group takes its share of the held-out pairs (group rank r of R: pairs r,
// r + R, ...), scores both sides train.micro_batch pairs at a time (forwards without a graph,
// the same number on every rank of the group) and sums; the world's sums give
//   accuracy          pairs whose chosen response scores strictly higher, over the pairs
//   loss              the Bradley–Terry loss, as training takes it (rm.margin: the rows' margins),
//                     averaged over the pairs
//   chosen_reward     the mean score of the chosen responses
//   rejected_reward   the mean score of the rejected ones
//   reward_margin     their difference (chosen - rejected), averaged
//   pairs             the pairs measured
#include <mpi.h>

#include <vector>

#include "quartet/engine/role_models.hpp"
#include "quartet/tune/pair_dataset.hpp"
#include "quartet/tune/stage.hpp"

namespace quartet {

class RmEvaluator {
 public:
  // `share`: this rank's held-out pairs; `pad_id`: what fills the padding.
  RmEvaluator(const Config& config, std::vector<PreferencePair> share, int64_t pad_id, MPI_Comm world);
  // Every rank at once; `reward` is null off the reward group.
  StageEval evaluate(RoleModel* reward, int64_t done);

 private:
  const Config& config_;
  std::vector<PreferencePair> share_;
  int64_t pad_id_;
  MPI_Comm world_;
};

}  // namespace quartet
