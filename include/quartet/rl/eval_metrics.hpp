#pragma once
// One evaluation's numbers ([eval], rl/evaluator.hpp): what its log line prints and run.h5's
// /eval stores. Each actor rank adds its own prompts' rows; reduce() makes them the world's.
//
// A completion passes when its reward is at least eval.pass_threshold. Per prompt:
//   greedy pass@1  whether the greedy (temperature 0) completion passes;
//   pass@k         of n sampled completions of which c pass, the unbiased estimator of Chen et
//                  al. 2021 ("Evaluating Large Language Models Trained on Code"):
//                  1 - C(n - c, k) / C(n, k), the chance that k of the n drawn without
//                  replacement hold at least one that passes; pass@1 = c / n.
// Each is averaged over the prompts, as are the rewards and the lengths (generated tokens, the
// stop token included, as training's response_length counts them).
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace quartet {

// 1 - C(n - c, k) / C(n, k), as the product 1 - prod_{i = n-c+1}^{n} (1 - k / i) (no large
// binomials). Requires 0 <= c <= n and 1 <= k <= n; throws quartet::Error otherwise.
double pass_at_k(int64_t n, int64_t c, int64_t k);

struct EvalMetrics {
  int64_t iteration = 0;   // iterations done when taken (0 = before the first)
  int64_t samples = 0;     // completions sampled per prompt (eval.samples; 0 = greedy only)
  std::vector<int> ks;     // eval.k
  // Sums over the prompts (the world's after reduce()).
  double prompts = 0, greedy_reward = 0, greedy_passed = 0, greedy_length = 0;
  double sample_reward = 0, sample_length = 0, pass1 = 0;
  std::vector<double> pass_k;  // per ks
  double seconds = 0;          // the slowest rank's, after reduce()

  EvalMetrics(int64_t iteration, int64_t samples, std::vector<int> ks);
  // One prompt: its greedy completion's reward and length, then its `samples` sampled ones'.
  void add_prompt(double greedy_reward, double greedy_length, const std::vector<double>& sampled_rewards,
                  const std::vector<double>& sampled_lengths, double pass_threshold);
  // Collective over the world.
  void reduce(MPI_Comm world);

  // name -> value, as run.h5's /eval has them: greedy_pass@1, greedy_reward, greedy_length,
  // prompts; with samples: pass@1, pass@<k> for each k > 1, sample_reward, sample_length, samples.
  std::map<std::string, double> named() const;
  // "eval  20/200 | greedy pass@1 0.250 reward 0.412 len 3.1 | 4 samples pass@1 0.180 pass@4 0.400
  //  reward 0.350 len 3.0 | 64 prompts 1.23s"
  std::string log_line(int iterations) const;
};

}  // namespace quartet
