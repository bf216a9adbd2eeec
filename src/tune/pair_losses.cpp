#include "quartet/tune/pair_losses.hpp"

#include <torch/types.h>

#include <string>

#include "quartet/core/check.hpp"
#include "quartet/engine/shape_checks.hpp"

namespace quartet {

namespace {

// At least float32: log σ of bf16 scores would round the loss to three digits.
torch::Tensor widened(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? t : t.to(torch::kFloat32);
}

void check_pair_vector(const char* fn, const char* name, const torch::Tensor& t) {
  QUARTET_CHECK(t.defined() && t.dim() == 1 && t.size(0) > 0 && t.is_floating_point(),
                std::string(fn) + ": " + name + " must be a non-empty floating-point [N] tensor, got " + shape_of(t));
}

PairMetrics metrics_of(const torch::Tensor& chosen, const torch::Tensor& rejected) {
  PairMetrics m;
  m.chosen = chosen.detach();
  m.rejected = rejected.detach();
  m.margins = m.chosen - m.rejected;
  m.accuracy = m.margins.gt(0).to(m.margins.scalar_type()).mean();
  return m;
}

}  // namespace

PairLoss bradley_terry_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores,
                            const torch::Tensor& margin) {
  const char* fn = "bradley_terry_loss";
  check_pair_vector(fn, "chosen_scores", chosen_scores);
  check_same_shape(fn, "chosen_scores", chosen_scores, "rejected_scores", rejected_scores);
  const auto rc = widened(chosen_scores), rr = widened(rejected_scores);
  auto d = rc - rr;
  if (margin.defined()) {
    check_same_shape(fn, "chosen_scores", chosen_scores, "margin", margin);
    d = d - margin.detach().to(d.scalar_type()).to(d.device());
  }
  PairLoss out;
  out.per_pair = -torch::log_sigmoid(d);
  out.loss = out.per_pair.mean();
  out.metrics = metrics_of(rc, rr);
  return out;
}

const char* preference_loss_name(PreferenceLossKind kind) {
  switch (kind) {
    case PreferenceLossKind::sigmoid: return "sigmoid";
    case PreferenceLossKind::ipo: return "ipo";
  }
  return "?";
}

torch::Tensor sequence_logps(const torch::Tensor& token_logps, const torch::Tensor& action_mask,
                             PreferenceLossKind kind) {
  const char* fn = "sequence_logps";
  QUARTET_CHECK(token_logps.defined() && token_logps.dim() == 2 && token_logps.is_floating_point(),
                std::string(fn) + ": token_logps must be a floating-point [N, A] tensor, got " + shape_of(token_logps));
  check_same_shape(fn, "token_logps", token_logps, "action_mask", action_mask);
  const auto keep = action_mask.to(token_logps.device()).ne(0);
  const auto lp = widened(token_logps);
  // where(), not a product: a masked slot's value (padding's log-prob, or a NaN) never leaks.
  const auto sum = torch::where(keep, lp, torch::zeros({}, lp.options())).sum(1);
  const auto count = keep.sum(1);
  QUARTET_CHECK(count.gt(0).all().item<bool>(), std::string(fn) + ": a row has no response tokens (its action "
                                                "mask is all zeros): a pair needs a response on each side");
  if (kind == PreferenceLossKind::sigmoid) return sum;
  return sum / count.to(sum.scalar_type());
}

PairLoss dpo_loss(const PairLogps& l, const DpoOptions& o) {
  const char* fn = "dpo_loss";
  check_pair_vector(fn, "policy_chosen", l.policy_chosen);
  check_same_shape(fn, "policy_chosen", l.policy_chosen, "policy_rejected", l.policy_rejected);
  check_same_shape(fn, "policy_chosen", l.policy_chosen, "reference_chosen", l.reference_chosen);
  check_same_shape(fn, "policy_chosen", l.policy_chosen, "reference_rejected", l.reference_rejected);
  QUARTET_CHECK(o.beta > 0, std::string(fn) + ": beta must be > 0, not " + std::to_string(o.beta));
  QUARTET_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 0.5,
                std::string(fn) + ": label_smoothing must lie in [0, 0.5), not " + std::to_string(o.label_smoothing));
  QUARTET_CHECK(o.label_smoothing == 0 || o.kind == PreferenceLossKind::sigmoid,
                std::string(fn) + ": label smoothing (conservative DPO) applies to the sigmoid loss, not to " +
                    preference_loss_name(o.kind));
  const auto pc = widened(l.policy_chosen), pr = widened(l.policy_rejected);
  const auto device = pc.device();
  const auto rc = widened(l.reference_chosen.detach()).to(device), rr = widened(l.reference_rejected.detach()).to(device);
  const auto chosen_ratio = pc - rc, rejected_ratio = pr - rr;
  const auto h = chosen_ratio - rejected_ratio;
  PairLoss out;
  if (o.kind == PreferenceLossKind::ipo) {
    out.per_pair = (h - 1.0 / (2.0 * o.beta)).pow(2);
  } else {
    const double eps = o.label_smoothing;
    out.per_pair = -(1.0 - eps) * torch::log_sigmoid(o.beta * h);
    if (eps > 0) out.per_pair = out.per_pair - eps * torch::log_sigmoid(-o.beta * h);
  }
  out.loss = out.per_pair.mean();
  out.metrics = metrics_of(o.beta * chosen_ratio, o.beta * rejected_ratio);
  return out;
}

}  // namespace quartet
