#include "quartet/rl/losses.hpp"

#include <torch/types.h>

#include <algorithm>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/engine/shape_checks.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

namespace {

torch::Tensor as_bool(const torch::Tensor& mask) {
  return mask.scalar_type() == torch::kBool ? mask : mask.ne(0);
}

// Mean of v over the action tokens of this micro-batch, keeping v's graph; 0 when there are none.
torch::Tensor masked_mean_local(const torch::Tensor& v, const torch::Tensor& keep) {
  auto sum = torch::where(keep, v, torch::zeros({}, v.options())).sum();
  return sum / keep.sum().clamp_min(1).to(v.scalar_type());
}

}  // namespace

torch::Tensor aggregation_weights(const torch::Tensor& action_mask, LossAgg mode) {
  auto keep = as_bool(action_mask);
  auto tokens = keep.sum(1).to(torch::kFloat32);
  return mode == LossAgg::token_mean ? tokens : tokens.gt(0).to(torch::kFloat32);
}

torch::Tensor aggregate_loss(const torch::Tensor& x, const torch::Tensor& action_mask, const LossAggregation& agg) {
  check_same_shape("aggregate_loss", "x", x, "action_mask", action_mask);
  auto keep = as_bool(action_mask);
  auto zero = torch::zeros({}, x.options());
  auto kept = torch::where(keep, x, zero);
  // Each step's denominator, or this call's own count (at least 1: an empty step adds 0).
  auto own = [&] { return aggregation_weights(keep, agg.mode).sum().clamp_min(1).to(x.scalar_type()); };
  const torch::Tensor den = agg.denominator.defined() ? agg.denominator.to(x.scalar_type()) : own();
  switch (agg.mode) {
    case LossAgg::token_mean:
      return kept.sum() / den;
    case LossAgg::seq_mean_token_mean: {
      auto n = keep.sum(1).clamp_min(1).to(x.scalar_type());
      return (kept.sum(1) / n).sum() / den;
    }
    case LossAgg::seq_mean_token_sum_norm:
      QUARTET_CHECK(agg.norm > 0, "aggregate_loss: seq-mean-token-sum-norm needs a constant > 0, got " +
                                      std::to_string(agg.norm));
      return (kept.sum(1) / agg.norm).sum() / den;
  }
  return kept.sum() / den;  // not reached
}

namespace {

// log r [B, T] of the policy loss, 0 at masked positions (rl/losses.hpp: ppo, or GSPO-token).
// Masked positions are replaced before anything is exponentiated, so that padding (possibly
// -inf log-probs) never produces inf * 0 = NaN in the graph.
torch::Tensor log_ratio_of(const torch::Tensor& logp, const torch::Tensor& log_ratio, const torch::Tensor& keep,
                           PolicyLossKind kind) {
  if (kind == PolicyLossKind::ppo) return log_ratio;
  auto zero = torch::zeros({}, log_ratio.options());
  auto n = keep.sum(1, /*keepdim=*/true).clamp_min(1).to(torch::kFloat32);
  auto seq = (log_ratio.sum(1, /*keepdim=*/true) / n).detach();  // log s_b, no gradient
  auto lp = torch::where(keep, logp.to(torch::kFloat32), zero);
  // The value is log s_b; the gradient is that of log pi_bt. Clamped above as verl does: a
  // sequence whose probability grew e^10-fold is clipped anyway.
  return torch::where(keep, (seq + lp - lp.detach()).clamp_max(10.0), zero);
}

}  // namespace

PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                       const torch::Tensor& action_mask, const PolicyLossOptions& opt, const LossAggregation& agg) {
  check_same_shape("policy_loss", "logp", logp, "old_logp", old_logp);
  check_same_shape("policy_loss", "logp", logp, "advantages", advantages);
  check_same_shape("policy_loss", "logp", logp, "action_mask", action_mask);
  QUARTET_CHECK(opt.clip_low > 0 && opt.clip_high > 0, "policy_loss: clip_low and clip_high must be > 0, got " +
                                                            std::to_string(opt.clip_low) + " and " +
                                                            std::to_string(opt.clip_high));
  QUARTET_CHECK(opt.clip_ratio_c == 0 || opt.clip_ratio_c > 1,
                "policy_loss: clip_ratio_c must be 0 or > 1, got " + std::to_string(opt.clip_ratio_c));
  auto keep = as_bool(action_mask);
  auto zero = torch::zeros({}, logp.options().dtype(torch::kFloat32));
  auto token_log_ratio = torch::where(keep, logp.to(torch::kFloat32) - old_logp.to(torch::kFloat32).detach(), zero);
  auto adv = torch::where(keep, advantages.to(torch::kFloat32).detach(), zero);
  auto ratio = log_ratio_of(logp, token_log_ratio, keep, opt.kind).exp();
  auto surr1 = ratio * adv;
  auto surr2 = ratio.clamp(1.0 - opt.clip_low, 1.0 + opt.clip_high) * adv;
  auto x = -torch::min(surr1, surr2);
  torch::Tensor dual;
  if (opt.clip_ratio_c > 0) {
    // Dual clip (Ye et al. 2020): a negative advantage with a ratio far above 1 would make the
    // loss grow without bound; it is capped at clip_ratio_c * |A|.
    auto bound = -opt.clip_ratio_c * adv;
    dual = adv.lt(0) & bound.lt(x);
    x = torch::where(adv.lt(0), torch::min(x, bound), x);
  }
  PolicyLoss out;
  out.loss = aggregate_loss(x, keep, agg);
  torch::NoGradGuard no_grad;
  // "Clipped" = the clipped term is the one the minimum takes (so the token gets no gradient),
  // as OpenRLHF and trl count it: a ratio beyond the clip on the side where it does not help
  // the objective is not clipped.
  out.clip_fraction = masked_mean_local(surr2.lt(surr1).to(torch::kFloat32), keep).detach();
  out.dual_clip_fraction = dual.defined() ? masked_mean_local(dual.to(torch::kFloat32), keep).detach() : zero;
  auto token_ratio = opt.kind == PolicyLossKind::ppo ? ratio : token_log_ratio.exp();
  out.approx_kl = masked_mean_local((token_ratio - 1) - token_log_ratio, keep).detach();
  return out;
}

PolicyLoss ppo_policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                           const torch::Tensor& advantages, const torch::Tensor& action_mask, double clip_eps) {
  QUARTET_CHECK(clip_eps > 0, "ppo_policy_loss: clip_eps must be > 0, got " + std::to_string(clip_eps));
  PolicyLossOptions opt;
  opt.clip_low = opt.clip_high = clip_eps;
  return policy_loss(logp, old_logp, advantages, action_mask, opt);
}

ValueLoss ppo_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                         const torch::Tensor& returns, const torch::Tensor& action_mask, double value_clip) {
  check_same_shape("ppo_value_loss", "values", values, "old_values", old_values);
  check_same_shape("ppo_value_loss", "values", values, "returns", returns);
  check_same_shape("ppo_value_loss", "values", values, "action_mask", action_mask);
  auto keep = as_bool(action_mask);
  auto zero = torch::zeros({}, values.options().dtype(torch::kFloat32));
  auto v = torch::where(keep, values.to(torch::kFloat32), zero);
  auto r = torch::where(keep, returns.to(torch::kFloat32).detach(), zero);
  auto err = (v - r).square();
  ValueLoss out;
  if (value_clip > 0) {
    auto old = torch::where(keep, old_values.to(torch::kFloat32).detach(), zero);
    auto v_clipped = old + (v - old).clamp(-value_clip, value_clip);
    auto err_clipped = (v_clipped - r).square();
    out.loss = 0.5 * masked_mean_local(torch::max(err, err_clipped), keep);
    torch::NoGradGuard no_grad;
    // Tokens where the clipped error is the larger one, i.e. the one that drives the update.
    out.clip_fraction = masked_mean_local(err_clipped.gt(err).to(torch::kFloat32), keep).detach();
  } else {
    out.loss = 0.5 * masked_mean_local(err, keep);
    out.clip_fraction = torch::zeros({}, zero.options());
  }
  return out;
}

torch::Tensor kl_loss(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& action_mask,
                      KlEstimator estimator, const LossAggregation& aggregation) {
  // kl_estimate detaches nothing, so the gradient flows through logp (ref_logp comes from a
  // frozen model and carries none).
  auto k = kl_estimate(logp, ref_logp.detach(), action_mask, estimator);
  return aggregate_loss(k, action_mask, aggregation);
}

}  // namespace quartet
