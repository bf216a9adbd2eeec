#include "quartet/rl/eval_metrics.hpp"

#include <algorithm>
#include <cstdio>

#include "quartet/core/check.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  QUARTET_CHECK(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n,
                "pass_at_k: needs 0 <= c <= n and 1 <= k <= n (n = " + std::to_string(n) + ", c = " +
                    std::to_string(c) + ", k = " + std::to_string(k) + ")");
  if (n - c < k) return 1.0;  // every k-subset holds a passing completion
  double none = 1.0;          // C(n - c, k) / C(n, k)
  for (int64_t i = n - c + 1; i <= n; ++i) none *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - none;
}

EvalMetrics::EvalMetrics(int64_t iteration_, int64_t samples_, std::vector<int> ks_)
    : iteration(iteration_), samples(samples_), ks(std::move(ks_)), pass_k(ks.size(), 0.0) {}

void EvalMetrics::add_prompt(double g_reward, double g_length, const std::vector<double>& rewards,
                             const std::vector<double>& lengths, double threshold) {
  QUARTET_CHECK(static_cast<int64_t>(rewards.size()) == samples && lengths.size() == rewards.size(),
                "EvalMetrics: " + std::to_string(rewards.size()) + " sampled rewards for a prompt, expected " +
                    std::to_string(samples));
  prompts += 1;
  greedy_reward += g_reward;
  greedy_length += g_length;
  greedy_passed += g_reward >= threshold ? 1 : 0;
  if (samples == 0) return;
  int64_t c = 0;
  for (size_t i = 0; i < rewards.size(); ++i) {
    sample_reward += rewards[i] / static_cast<double>(samples);
    sample_length += lengths[i] / static_cast<double>(samples);
    c += rewards[i] >= threshold ? 1 : 0;
  }
  pass1 += pass_at_k(samples, c, 1);
  for (size_t j = 0; j < ks.size(); ++j) pass_k[j] += pass_at_k(samples, c, ks[j]);
}

void EvalMetrics::reduce(MPI_Comm world) {
  std::vector<double*> sums = {&prompts, &greedy_reward, &greedy_passed, &greedy_length,
                               &sample_reward, &sample_length, &pass1};
  for (double& v : pass_k) sums.push_back(&v);
  std::vector<double> s;
  for (double* v : sums) s.push_back(*v);
  watched::allreduce(MPI_IN_PLACE, s.data(), static_cast<int>(s.size()), MPI_DOUBLE, MPI_SUM, world,
                     "the evaluation's sums");
  for (size_t i = 0; i < s.size(); ++i) *sums[i] = s[i];
  watched::allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world, "the evaluation's time");
}

std::map<std::string, double> EvalMetrics::named() const {
  const double n = std::max(1.0, prompts);
  std::map<std::string, double> m = {{"prompts", prompts},
                                     {"greedy_pass@1", greedy_passed / n},
                                     {"greedy_reward", greedy_reward / n},
                                     {"greedy_length", greedy_length / n}};
  if (samples > 0) {
    m["samples"] = static_cast<double>(samples);
    m["pass@1"] = pass1 / n;
    for (size_t j = 0; j < ks.size(); ++j)
      if (ks[j] != 1) m["pass@" + std::to_string(ks[j])] = pass_k[j] / n;
    m["sample_reward"] = sample_reward / n;
    m["sample_length"] = sample_length / n;
  }
  return m;
}

std::string EvalMetrics::log_line(int iterations) const {
  const double n = std::max(1.0, prompts);
  char buf[256];
  std::snprintf(buf, sizeof buf, "eval %*lld/%d | greedy pass@1 %.3f reward %.3f len %.1f",
                static_cast<int>(std::to_string(iterations).size()), static_cast<long long>(iteration), iterations,
                greedy_passed / n, greedy_reward / n, greedy_length / n);
  std::string line = buf;
  if (samples > 0) {
    std::snprintf(buf, sizeof buf, " | %lld samples pass@1 %.3f", static_cast<long long>(samples), pass1 / n);
    line += buf;
    for (size_t j = 0; j < ks.size(); ++j) {
      if (ks[j] == 1) continue;
      std::snprintf(buf, sizeof buf, " pass@%d %.3f", ks[j], pass_k[j] / n);
      line += buf;
    }
    std::snprintf(buf, sizeof buf, " reward %.3f len %.1f", sample_reward / n, sample_length / n);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, " | %.0f prompts %.2fs", prompts, seconds);
  return line + buf;
}

}  // namespace quartet
