#pragma once
// The held-out measurement of `quartet dpo` (dpo.heldout; docs/dpo.md), every rank at once: the
// actor group's ranks take the held-out pairs' chunks in turn (tune/dpo_batches.hpp), run both
// sides through the policy without a graph, and with the reference's log-probs (computed once,
// tune/dpo_reference.hpp) measure, as means over the pairs, summed over the world:
//   loss             the DPO loss of the run's kind, beta and label smoothing
//   reward_accuracy  pairs whose implicit chosen reward beats the rejected one (a tie is wrong)
//   chosen_reward, rejected_reward   beta (log pi - log pi_ref) of each side (TRL's rewards/*)
//   reward_margin    their difference
//   chosen_logp, rejected_logp       the policy's sequence log-probs
// and `pairs`, the count. A pair's numbers do not depend on the number of actor ranks.
#include <mpi.h>

#include "quartet/engine/role_models.hpp"
#include "quartet/tune/dpo_reference.hpp"
#include "quartet/tune/pair_losses.hpp"
#include "quartet/tune/stage.hpp"

namespace quartet {

// The sums of one micro-batch's pair statistics, in the order of dpo_statistic_names(): reward
// accuracy, chosen and rejected reward, margin, chosen and rejected log-probs (0-dim, detached).
std::vector<torch::Tensor> dpo_statistic_sums(const PairLoss& loss, const PairLogps& logps);
std::vector<std::string> dpo_statistic_names();

class DpoEvaluator {
 public:
  // `pairs` (and the held-out reference numbers) must outlive the evaluator; `count`: the
  // pairs evaluated (the first ones).
  DpoEvaluator(const PairDataset& pairs, int64_t count, ReferenceLogps reference, const PairScoring& scoring,
               const DpoOptions& options, MPI_Comm world);
  // Every rank at once; `actor` is null off the actor group.
  StageEval evaluate(RoleModel* actor, int64_t done);

 private:
  const PairDataset& pairs_;
  int64_t count_;
  ReferenceLogps reference_;
  PairScoring scoring_;
  DpoOptions options_;
  MPI_Comm world_;
};

}  // namespace quartet
