#pragma once
// The pairwise losses of preference training, as functions of per-sequence quantities (one value
// per pair and side, shape [N]); docs/preference.md says where each convention comes from.
//   reward model   Bradley–Terry:  l = -log σ(r_c - r_r - m)          (m: an optional margin per pair)
//   DPO (sigmoid)  h = (log π_c - log π_ref,c) - (log π_r - log π_ref,r)
//                  l = -(1 - ε) log σ(β h) - ε log σ(-β h)            (ε > 0: conservative DPO)
//   IPO            l = (h - 1 / (2β))^2
// log π of a sequence is the sum of its response tokens' log-probs (DPO), or their mean (IPO, as
// TRL's DPOTrainer takes it): sequence_logps. Each loss is the mean of its per-pair terms; the
// per-pair terms are returned too, with grad, for a caller that spreads a step over several
// micro-batches or ranks and divides by the step's pair count itself.
#include <torch/types.h>

namespace quartet {

// What each stage logs, all detached:
//   chosen, rejected  [N]  the reward model's scores r_c, r_r (Bradley–Terry), or DPO's implicit
//                          rewards β (log π_c - log π_ref,c) and β (log π_r - log π_ref,r)
//   margins           [N]  chosen - rejected
//   accuracy          0-dim  the share of pairs with chosen > rejected (strictly; a tie counts
//                          as wrong): the reward model's pairwise accuracy, DPO's reward accuracy
struct PairMetrics {
  torch::Tensor chosen, rejected, margins, accuracy;
};

struct PairLoss {
  torch::Tensor per_pair;  // [N], with grad
  torch::Tensor loss;      // 0-dim mean of per_pair, with grad
  PairMetrics metrics;
};

// chosen_scores, rejected_scores [N] (with grad); margin [N] or undefined (0), without grad.
PairLoss bradley_terry_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores,
                            const torch::Tensor& margin = {});

enum class PreferenceLossKind { sigmoid, ipo };
const char* preference_loss_name(PreferenceLossKind kind);

struct DpoOptions {
  PreferenceLossKind kind = PreferenceLossKind::sigmoid;
  double beta = 0.1;             // > 0
  double label_smoothing = 0.0;  // ε of conservative DPO, in [0, 0.5); sigmoid only
};

// A sequence's log-prob as `kind` wants it, from token log-probs [N, A] and the action mask
// [N, A] marking the response tokens: the masked sum (sigmoid), or the masked mean (ipo). A row
// without response tokens is refused. Keeps token_logps' graph.
torch::Tensor sequence_logps(const torch::Tensor& token_logps, const torch::Tensor& action_mask,
                             PreferenceLossKind kind);

// Per-sequence log-probs [N] of each side, as sequence_logps makes them: the policy's with grad,
// the frozen reference's without.
struct PairLogps {
  torch::Tensor policy_chosen, policy_rejected, reference_chosen, reference_rejected;
};
PairLoss dpo_loss(const PairLogps& logps, const DpoOptions& options);

}  // namespace quartet
