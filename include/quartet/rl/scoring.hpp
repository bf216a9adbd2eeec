#pragma once
// The score phase of `train`, one interface for both placements:
//   colocated  every model is on every rank: the actor's whole batch goes through the
//              reference, the reward model and the critic in turn (the idle ones parked);
//   disjoint   each generation chunk goes over MPI to the scoring groups as soon as the actor
//              has made it (hand_off), so that chunk c is scored while c + 1 is generated; a
//              scoring rank answers each chunk as it comes, and the actor ranks collect.
// Either way the actor ranks end with the reference log-probs, the reward model's scores, the
// critic's values and the decoded completions; critic ranks with the rollouts they valued.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "quartet/dist/runtime.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/rl/iteration.hpp"
#include "quartet/rl/model_parking.hpp"

namespace quartet {

// The prompts of a batch's rows, one each: the text the actor was prompted with and its JSONL
// row (Iteration::prompts and ::records), for a reward model that reads the rollouts as text.
struct RowPrompts {
  std::vector<std::string> texts, records;
};

// The reward model's rows for a rollout batch, given the completions' text and the rows' prompts
// (rl/rewards/reward_retokenizer.hpp).
using RewardInput = std::function<RolloutBatch(const RolloutBatch& rollouts, const std::vector<std::string>& completions,
                                               const RowPrompts& prompts)>;

struct ScoringSetup {
  int chunks = 1;                  // generation chunks per iteration
  ScorePasses passes = 1;          // how scoring forward passes take their rows (rows, or packed tokens)
  int64_t pad_id = 0;
  int64_t max_width = 0;           // the widest rollout (engine/experience.hpp's width buckets)
  SamplingView view;               // what the log-probs are taken over
  // The completions' text, decoded on the actor ranks (while the scoring groups work, disjoint).
  std::function<std::vector<std::string>(const RolloutBatch&)> decode;
  // Unset: the reward model reads the actor's ids. Set (every rank alike, actor ranks call it):
  // it reads these rows, padded with reward_pad_id.
  RewardInput reward_input;
  int64_t reward_pad_id = 0;
};

class Scoring {
 public:
  virtual ~Scoring() = default;
  // Actor ranks, as soon as chunk `chunk` is generated (its rows' prompts beside it).
  virtual void hand_off(int chunk, const RolloutBatch& rollouts, const RowPrompts& prompts) = 0;
  // Every rank, after generation: fills the iteration's score fields this rank holds. The
  // clock's running phase is scoring; a scoring rank's wait for its first chunk is charged to
  // generation.
  virtual void score(Iteration& it, PhaseClock& clock) = 0;
  // Every rank, after the advantages: the critic ranks get the returns (PPO).
  virtual void send_returns(Iteration& it) = 0;
  // Every rank, outside the iteration's phases (evaluation, rl/evaluator.hpp): the reward
  // model's scores [rows] of the actor ranks' `rollouts` (which may have 0 rows; their decoded
  // completions and prompts beside them), returned there; the reward ranks serve them. Undefined
  // elsewhere, and in a run without a reward model.
  virtual torch::Tensor reward_scores(const RolloutBatch& rollouts, const std::vector<std::string>& completions,
                                      const RowPrompts& prompts) = 0;
};

std::unique_ptr<Scoring> make_scoring(Runtime& rt, const RoleModels& models, ModelParking& parking,
                                      ScoringSetup setup);

// [r_c, A_c] parts as one [sum r_c, actions] tensor, right-padded with zeros.
torch::Tensor cat_actions(const std::vector<torch::Tensor>& parts, int64_t actions);

}  // namespace quartet
