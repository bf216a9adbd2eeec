#include "quartet/rl/iteration_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <vector>

#include "quartet/core/units.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

void IterationMetrics::add_rollouts(const torch::Tensor& scores, const torch::Tensor& mask, const torch::Tensor& kl) {
  score_sum += scores.sum().item<double>();
  score_sq_sum += scores.pow(2).sum().item<double>();
  score_count += static_cast<double>(scores.numel());
  score_min = std::min(score_min, scores.min().item<double>());
  score_max = std::max(score_max, scores.max().item<double>());
  length_sum += mask.sum().item<double>();
  if (kl.defined()) kl_sum += kl.sum().item<double>();
}

void IterationMetrics::name_reward_terms(const std::vector<std::string>& names) {
  reward_term_names = names;
  reward_term_sums.assign(names.size(), 0.0);
}

void IterationMetrics::add_reward_terms(const torch::Tensor& terms) {
  const auto sums = terms.to(torch::kCPU).to(torch::kFloat64).sum(0).contiguous();
  for (size_t t = 0; t < reward_term_sums.size() && t < static_cast<size_t>(sums.numel()); ++t)
    reward_term_sums[t] += sums[static_cast<int64_t>(t)].item<double>();
}

void IterationMetrics::add_policy(const UpdateStats& s, double kl_coefficient) {
  policy_loss += s.loss;
  clip_fraction += s.clip_fraction;
  dual_clip_fraction += s.dual_clip_fraction;
  approx_kl += s.approx_kl;
  entropy += s.entropy;
  kl_loss += s.kl_loss;
  grad_norm_actor += s.grad_norm;
  lr += s.lr;
  kl_coef += kl_coefficient;
}

void IterationMetrics::add_value(const UpdateStats& s) {
  value_loss += s.loss;
  value_clip_fraction += s.clip_fraction;
  grad_norm_critic += s.grad_norm;
}

void IterationMetrics::reduce(MPI_Comm world) {
  double* sums[] = {&score_sum,  &score_sq_sum,  &score_count, &kl_sum,          &length_sum,
                    &policy_loss, &clip_fraction, &approx_kl,  &entropy,         &kl_loss,
                    &value_loss, &value_clip_fraction, &grad_norm_actor, &grad_norm_critic, &kl_coef, &lr,
                    &dual_clip_fraction, &truncated, &overlong_penalty, &groups_drawn, &groups_dropped,
                    &groups_filled, &drawn_score_sum, &drawn_count, &sampling_rounds};
  std::vector<double> s;
  for (double* v : sums) s.push_back(*v);
  s.insert(s.end(), reward_term_sums.begin(), reward_term_sums.end());
  watched::allreduce(MPI_IN_PLACE, s.data(), static_cast<int>(s.size()), MPI_DOUBLE, MPI_SUM, world,
                     "the iteration's metrics");
  for (size_t i = 0; i < std::size(sums); ++i) *sums[i] = s[i];
  std::copy(s.begin() + static_cast<std::ptrdiff_t>(std::size(sums)), s.end(), reward_term_sums.begin());
  // The lowest score as the highest of its negation: one MAX reduction carries all the rest.
  std::vector<double> m{-score_min, score_max, iteration_seconds, decode_seconds, decode_steps};
  m.insert(m.end(), phase_seconds.begin(), phase_seconds.end());
  watched::allreduce(MPI_IN_PLACE, m.data(), static_cast<int>(m.size()), MPI_DOUBLE, MPI_MAX, world,
                     "the iteration's extremes and times");
  score_min = -m[0];
  score_max = m[1];
  iteration_seconds = m[2];
  decode_seconds = m[3];
  decode_steps = m[4];
  std::copy(m.begin() + 5, m.end(), phase_seconds.begin());
}

double IterationMetrics::reward_mean() const { return score_sum / std::max(1.0, score_count); }
double IterationMetrics::reward_std() const {
  const double n = std::max(1.0, score_count), mean = reward_mean();
  return std::sqrt(std::max(0.0, score_sq_sum / n - mean * mean));
}
double IterationMetrics::kl_per_sequence() const { return kl_sum / std::max(1.0, score_count); }
double IterationMetrics::response_length() const { return length_sum / std::max(1.0, score_count); }
double IterationMetrics::tokens_per_second() const { return length_sum / std::max(1e-9, iteration_seconds); }

std::string IterationMetrics::log_line(int iteration, int iterations, const AlgorithmSpec& algorithm,
                                       double eta_seconds) const {
  std::string line;
  char buf[512];
  std::snprintf(buf, sizeof buf, "iter %*d/%d | reward %.3f ±%.3f [%.2f, %.2f]",
                static_cast<int>(std::to_string(iterations).size()), iteration, iterations, reward_mean(), reward_std(),
                score_min, score_max);
  line += buf;
  // Each reward term's mean raw score, in the deck's order.
  for (size_t t = 0; t < reward_term_names.size(); ++t) {
    std::snprintf(buf, sizeof buf, "%s%s %.3f", t == 0 ? " (" : " ", reward_term_names[t].c_str(),
                  reward_term_sums[t] / std::max(1.0, score_count));
    line += buf;
  }
  if (!reward_term_names.empty()) line += ")";
  std::snprintf(buf, sizeof buf, " | kl %.4f (coef %.3f) | policy %+.4f clip %.3f", kl_per_sequence(), kl_coef,
                policy_loss, clip_fraction);
  line += buf;
  if (algorithm.trains_critic) {
    std::snprintf(buf, sizeof buf, " | value %.4f", value_loss);
    line += buf;
  }
  if (show_dual_clip) {
    std::snprintf(buf, sizeof buf, " dual %.3f", dual_clip_fraction);
    line += buf;
  }
  if (show_dynamic_sampling) {
    std::snprintf(buf, sizeof buf, " | drawn %.0f groups, %.0f dropped, %.0f filled, %.0f rounds, reward %.3f",
                  groups_drawn, groups_dropped, groups_filled, sampling_rounds,
                  drawn_score_sum / std::max(1.0, drawn_count));
    line += buf;
  }
  if (show_overlong) {
    std::snprintf(buf, sizeof buf, " | truncated %.3f penalty %.3f", truncated / std::max(1.0, score_count),
                  overlong_penalty / std::max(1.0, score_count));
    line += buf;
  }
  std::snprintf(buf, sizeof buf, " | len %.1f | %.0f tok/s | gen %.2fs score %.2fs adv %.2fs train %.2fs iter %.2fs | ETA %s",
                response_length(), tokens_per_second(), phase_seconds[kGenerate], phase_seconds[kScore],
                phase_seconds[kAdvantages], phase_seconds[kTrain], iteration_seconds, duration_text(eta_seconds).c_str());
  return line + buf;
}

std::map<std::string, double> IterationMetrics::named(const AlgorithmSpec& algorithm) const {
  std::map<std::string, double> m = {
      {"reward_mean", reward_mean()}, {"reward_std", reward_std()}, {"reward_min", score_min},
      {"reward_max", score_max}, {"kl", kl_per_sequence()}, {"kl_coef", kl_coef}, {"policy_loss", policy_loss},
      {"clip_fraction", clip_fraction}, {"approx_kl", approx_kl}, {"entropy", entropy},
      {"response_length", response_length()}, {"tokens_per_s", tokens_per_second()}, {"lr", lr},
      {"grad_norm_actor", grad_norm_actor}, {"time_iteration", iteration_seconds}, {"time_decode", decode_seconds},
      {"decode_steps", decode_steps}};
  for (int p = 0; p < kPhases; ++p) m[std::string("time_") + kPhaseNames[p]] = phase_seconds[p];
  if (algorithm.trains_critic) {
    m["value_loss"] = value_loss;
    m["value_clip_fraction"] = value_clip_fraction;
    m["grad_norm_critic"] = grad_norm_critic;
  }
  if (algorithm.kl == KlUse::loss) m["kl_loss"] = kl_loss;
  if (show_dual_clip) m["dual_clip_fraction"] = dual_clip_fraction;
  if (show_dynamic_sampling) {
    m["groups_drawn"] = groups_drawn;
    m["groups_dropped"] = groups_dropped;
    m["groups_filled"] = groups_filled;
    m["sampling_rounds"] = sampling_rounds;
    m["reward_drawn_mean"] = drawn_score_sum / std::max(1.0, drawn_count);
  }
  if (show_overlong) {
    m["truncated_fraction"] = truncated / std::max(1.0, score_count);
    m["overlong_penalty"] = overlong_penalty / std::max(1.0, score_count);
  }
  for (size_t t = 0; t < reward_term_names.size(); ++t)
    m["reward." + reward_term_names[t]] = reward_term_sums[t] / std::max(1.0, score_count);
  return m;
}

}  // namespace quartet
