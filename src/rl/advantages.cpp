#include "quartet/rl/advantages.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/engine/shape_checks.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

namespace {

void check_bt(const char* fn, const char* name, const torch::Tensor& t) {
  QUARTET_CHECK(t.defined() && t.dim() == 2,
                std::string(fn) + ": " + name + " must be [B, T], got " + shape_of(t));
}

// The mask as booleans: callers pass bool, integer or float masks. Every function selects with
// torch::where on it rather than multiplying, so masked positions are never read (a NaN or an
// inf in a padded slot cannot leak into the result).
torch::Tensor as_bool(const torch::Tensor& mask) {
  return mask.scalar_type() == torch::kBool ? mask : mask.ne(0);
}

torch::Tensor masked_float(const torch::Tensor& x, const torch::Tensor& keep) {
  return torch::where(keep, x.to(torch::kFloat32), torch::zeros({}, x.options().dtype(torch::kFloat32)));
}

}  // namespace

torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                          const torch::Tensor& action_mask, KlEstimator estimator) {
  check_same_shape("kl_estimate", "logp", logp, "ref_logp", ref_logp);
  check_same_shape("kl_estimate", "logp", logp, "action_mask", action_mask);
  auto keep = as_bool(action_mask);
  // float32 whatever the models computed in: bf16 log-probs differ by ~1e-2, the KL is smaller.
  // Masked positions are zeroed before the estimator so their values (perhaps -inf) cannot
  // reach exp() and turn the gradient into 0 * inf = NaN.
  auto r = ref_logp.to(torch::kFloat32) - logp.to(torch::kFloat32);
  r = torch::where(keep, r, torch::zeros({}, r.options()));
  torch::Tensor k;
  switch (estimator) {
    case KlEstimator::k1: k = -r; break;
    case KlEstimator::k2: k = r.square() * 0.5; break;
    case KlEstimator::k3: k = torch::exp(r) - 1 - r; break;
  }
  // As OpenRLHF: each token's estimate is clamped to [-10, 10], so one token whose ratio ran
  // away (exp(r) in k3 grows without bound) cannot dominate the penalty or the loss.
  k = k.clamp(-10.0, 10.0);
  return torch::where(keep, k, torch::zeros({}, k.options()));
}

torch::Tensor token_rewards(const torch::Tensor& scores, const torch::Tensor& kl,
                            const torch::Tensor& action_mask, double kl_coef) {
  check_bt("token_rewards", "action_mask", action_mask);
  const int64_t B = action_mask.size(0), T = action_mask.size(1);
  QUARTET_CHECK(scores.defined() && scores.dim() == 1 && scores.size(0) == B,
                "token_rewards: scores must be [B] = [" + std::to_string(B) + "] (action_mask " +
                    shape_of(action_mask) + "), got " + shape_of(scores));
  auto keep = as_bool(action_mask);
  auto zero = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(action_mask.device()));
  torch::Tensor rewards;
  if (kl.defined()) {
    check_same_shape("token_rewards", "kl", kl, "action_mask", action_mask);
    rewards = torch::where(keep, kl.to(torch::kFloat32) * -kl_coef, zero);
  } else {
    rewards = torch::zeros({B, T}, zero.options());
  }
  // Last action token of each row: the highest index whose mask is set. (t + 1) * mask has its
  // maximum there; 0 means the row has no action token and gets no score.
  auto pos1 = torch::arange(1, T + 1, torch::TensorOptions().dtype(torch::kLong).device(keep.device()));
  auto last1 = torch::where(keep, pos1, torch::zeros({}, pos1.options())).amax(1);  // [B]
  auto at_last = pos1.unsqueeze(0).eq(last1.unsqueeze(1)) & last1.gt(0).unsqueeze(1);
  return rewards + torch::where(at_last, scores.to(torch::kFloat32).unsqueeze(1), zero);
}

// gae and discounted_returns run the backward recursion X_t = y_t + c X_{t+1} column by column
// over T. Masked positions are skipped rather than treated as steps: the state is carried
// through them unchanged and they come back 0. For the usual masks (1...1 0...0) this is exactly
// OpenRLHF's recursion on mask-multiplied inputs (the tail contributes 0, and the last action
// token sees V = 0 and A = 0 after it); for masks with holes (tool output inside a response) the
// next *action* token is the next step, as verl does it.
//
// The recursion runs on the host, row by row: on a GPU each of T columns would be half a dozen
// tiny kernels (about 15 ms of launches for T = 256), against one copy each way. The float32
// operations are ATen's, in its order (a scalar multiplies in float32, then add, then subtract).
namespace {

struct HostRows {
  torch::Tensor keep, r, v;  // contiguous, on the CPU: bool, float32, float32 (v may be undefined)
};

HostRows to_host(const torch::Tensor& keep, const torch::Tensor& r, const torch::Tensor& v) {
  HostRows h;
  h.keep = keep.to(torch::kCPU).contiguous();
  h.r = r.to(torch::kCPU).contiguous();
  if (v.defined()) h.v = v.to(torch::kCPU).contiguous();
  return h;
}

}  // namespace

AdvantagesReturns gae(const torch::Tensor& rewards, const torch::Tensor& values,
                      const torch::Tensor& action_mask, double gamma, double lambda) {
  check_bt("gae", "rewards", rewards);
  check_same_shape("gae", "rewards", rewards, "values", values);
  check_same_shape("gae", "rewards", rewards, "action_mask", action_mask);
  torch::NoGradGuard no_grad;  // advantages and returns are targets, never differentiated
  auto keep = as_bool(action_mask);
  auto r = masked_float(rewards, keep);
  auto v = masked_float(values, keep);
  const int64_t B = r.size(0), T = r.size(1);
  const HostRows h = to_host(keep, r, v);
  auto adv_host = torch::zeros({B, T}, h.r.options());
  const bool* k = h.keep.data_ptr<bool>();
  const float* rp = h.r.data_ptr<float>();
  const float* vp = h.v.data_ptr<float>();
  float* ap = adv_host.data_ptr<float>();
  const float g = static_cast<float>(gamma), gl = static_cast<float>(gamma * lambda);
  for (int64_t b = 0; b < B; ++b) {
    // State carried backwards over the action tokens: the value of the next action token and
    // the advantage there; both 0 after the last one.
    float next_value = 0.0f, next_adv = 0.0f;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t i = b * T + t;
      if (!k[i]) continue;  // stays 0
      const float scaled_value = g * next_value;
      const float delta = (rp[i] + scaled_value) - vp[i];
      const float scaled_adv = gl * next_adv;
      const float a = delta + scaled_adv;
      ap[i] = a;
      next_adv = a;
      next_value = vp[i];
    }
  }
  AdvantagesReturns out;
  out.advantages = adv_host.to(r.device());
  out.returns = torch::where(keep, out.advantages + v, torch::zeros({}, v.options()));
  return out;
}

torch::Tensor discounted_returns(const torch::Tensor& rewards, const torch::Tensor& action_mask, double gamma) {
  check_bt("discounted_returns", "rewards", rewards);
  check_same_shape("discounted_returns", "rewards", rewards, "action_mask", action_mask);
  torch::NoGradGuard no_grad;
  auto keep = as_bool(action_mask);
  auto r = masked_float(rewards, keep);
  const int64_t B = r.size(0), T = r.size(1);
  const HostRows h = to_host(keep, r, torch::Tensor());
  auto out = torch::zeros({B, T}, h.r.options());
  const bool* k = h.keep.data_ptr<bool>();
  const float* rp = h.r.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float g = static_cast<float>(gamma);
  for (int64_t b = 0; b < B; ++b) {
    float next = 0.0f;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t i = b * T + t;
      if (!k[i]) continue;  // skipped positions do not discount
      const float scaled = g * next;
      next = rp[i] + scaled;
      op[i] = next;
    }
  }
  return out.to(r.device());
}

namespace {

// [B] scores -> [G, n] groups, with the checks both group baselines need.
torch::Tensor grouped_scores(const char* fn, const torch::Tensor& scores, const torch::Tensor& action_mask,
                             int samples_per_prompt, int min_samples) {
  check_bt(fn, "action_mask", action_mask);
  const int64_t B = action_mask.size(0);
  QUARTET_CHECK(scores.defined() && scores.dim() == 1 && scores.size(0) == B,
                std::string(fn) + ": scores must be [B] = [" + std::to_string(B) + "] (action_mask " +
                    shape_of(action_mask) + "), got " + shape_of(scores));
  QUARTET_CHECK(samples_per_prompt >= min_samples,
                std::string(fn) + ": samples_per_prompt must be >= " + std::to_string(min_samples) +
                    ", got " + std::to_string(samples_per_prompt));
  QUARTET_CHECK(B % samples_per_prompt == 0,
                std::string(fn) + ": the batch of " + std::to_string(B) +
                    " sequences is not a whole number of groups of samples_per_prompt = " +
                    std::to_string(samples_per_prompt));
  // float64 for the group statistics: scores may be large and groups are small.
  return scores.to(torch::kFloat64).reshape({B / samples_per_prompt, samples_per_prompt});
}

torch::Tensor spread(const torch::Tensor& per_sequence, const torch::Tensor& action_mask) {
  auto keep = as_bool(action_mask);
  auto a = per_sequence.reshape({-1}).to(torch::kFloat32).unsqueeze(1);
  return torch::where(keep, a, torch::zeros({}, a.options()));
}

}  // namespace

torch::Tensor grpo_advantages(const torch::Tensor& scores, const torch::Tensor& action_mask,
                              int samples_per_prompt, double eps, bool scale_by_std) {
  torch::NoGradGuard no_grad;
  auto g = grouped_scores("grpo_advantages", scores, action_mask, samples_per_prompt, 1);
  auto mean = g.mean(1, /*keepdim=*/true);
  if (!scale_by_std) return spread(g - mean, action_mask);
  auto std = (g - mean).square().mean(1, /*keepdim=*/true).sqrt();  // population std (no Bessel)
  return spread((g - mean) / (std + eps), action_mask);
}

torch::Tensor group_centred(const torch::Tensor& scores, int samples_per_prompt) {
  torch::NoGradGuard no_grad;
  QUARTET_CHECK(scores.defined() && scores.dim() == 1, "group_centred: scores must be [B], got " + shape_of(scores));
  const int64_t B = scores.size(0);
  auto g = grouped_scores("group_centred", scores, torch::ones({B, 1}, scores.options()), samples_per_prompt, 1);
  return (g - g.mean(1, /*keepdim=*/true)).reshape({B}).to(torch::kFloat32);
}

torch::Tensor rloo_advantages(const torch::Tensor& scores, const torch::Tensor& action_mask,
                              int samples_per_prompt) {
  torch::NoGradGuard no_grad;
  auto g = grouped_scores("rloo_advantages", scores, action_mask, samples_per_prompt, 2);
  auto others = (g.sum(1, /*keepdim=*/true) - g) / double(samples_per_prompt - 1);
  return spread(g - others, action_mask);
}

namespace {

// Sum and count of x over mask, in float64 on x's device, summed over the group when there is
// one: the shared first pass of masked_mean and masked_whiten.
struct SumCount {
  torch::Tensor sum, count;  // 0-dim float64
};
SumCount masked_sum_count(const torch::Tensor& x, const torch::Tensor& keep, Collectives* group) {
  auto x64 = x.to(torch::kFloat64);
  auto s = torch::where(keep, x64, torch::zeros({}, x64.options())).sum();
  auto c = keep.sum().to(torch::kFloat64);
  if (!group) return {s, c};
  auto both = summed_over(group, torch::stack({s.detach(), c}));
  return {both[0], both[1]};
}

}  // namespace

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, Collectives* group) {
  check_same_shape("masked_mean", "x", x, "mask", mask);
  auto keep = as_bool(mask);
  auto sc = masked_sum_count(x, keep, group);
  // Nothing selected: 0 rather than NaN, so an empty micro-batch logs 0 instead of poisoning
  // averages. Without a group the result keeps x's autograd graph; with one it is detached.
  auto mean = sc.sum / sc.count.clamp_min(1.0);
  return mean.to(x.is_floating_point() ? x.scalar_type() : torch::kFloat32);
}

torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, Collectives* group,
                            bool shift_mean, double eps) {
  check_same_shape("masked_whiten", "x", x, "mask", mask);
  torch::NoGradGuard no_grad;
  auto keep = as_bool(mask);
  auto x64 = x.to(torch::kFloat64);
  auto zero = torch::zeros({}, x64.options());
  // Two passes (mean, then the centred sum of squares), each all-reduced in float64: the second
  // pass avoids the cancellation of sum(x^2) - n mean^2 when the mean is large against the spread.
  auto sc = masked_sum_count(x64, keep, group);
  auto n = sc.count.clamp_min(1.0);
  auto mean = sc.sum / n;
  auto centred = x64 - mean;
  auto ss = torch::where(keep, centred.square(), zero).sum();
  ss = summed_over(group, ss.reshape({1})).reshape({});
  // Population variance (divide by n, no Bessel correction), as OpenRLHF's advantage
  // normalisation and masked_normalize do: the batch is the whole population being rescaled.
  auto var = ss / n;
  auto w = centred * torch::rsqrt(var + eps);
  if (!shift_mean) w = w + mean;  // keep the mean, rescale the spread around it (trl's whiten)
  return torch::where(keep, w, zero).to(x.is_floating_point() ? x.scalar_type() : torch::kFloat32);
}

void KlController::update(double kl, double samples) {
  if (!adaptive) return;
  QUARTET_CHECK(target > 0 && horizon > 0, "KlController: target and horizon must be > 0 (target " +
                                               std::to_string(target) + ", horizon " + std::to_string(horizon) + ")");
  const double e = std::clamp(kl / target - 1.0, -0.2, 0.2);
  coef *= 1.0 + e * samples / horizon;
}

}  // namespace quartet
