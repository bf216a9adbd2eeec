#include "quartet/rl/iteration_record.hpp"

#include <vector>

#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

namespace {

RolloutRecord rollouts_of(const Iteration& it) {
  RolloutRecord ro;
  ro.iteration = it.index + 1;
  ro.sequences = it.batch.sequences;
  ro.attention_mask = it.batch.attention_mask;
  ro.action_mask = it.batch.action_mask;
  ro.scores = it.scores;
  ro.logprobs = it.old_logp;
  ro.ref_logprobs = it.ref_logp;
  ro.values = it.values;
  ro.advantages = it.advantages;
  ro.returns = it.returns;
  ro.prompts = it.prompts;
  ro.completions = it.completions;
  return ro;
}

}  // namespace

void record_iteration(RunFile* run_file, const World& world, const Iteration& it, const IterationMetrics& metrics,
                      const PhaseClock& clock, const AlgorithmSpec& algorithm, int rollouts_every,
                      const std::vector<EvalMetrics>& evals) {
  // Every rank's phase times, then its peaks.
  std::vector<double> mine(clock.all_seconds().begin(), clock.all_seconds().end());
  mine.insert(mine.end(), clock.peak_bytes().begin(), clock.peak_bytes().end());
  std::vector<double> per_rank(static_cast<size_t>(world.size()) * mine.size());
  watched::allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, per_rank.data(), world.comm(),
                     "every rank's phase times and peaks");
  if (!run_file) return;
  IterationRecord rec;
  rec.iteration = it.index + 1;
  rec.metrics = metrics.named(algorithm);
  for (int p = 0; p < kPhases; ++p) {
    auto& times = rec.timing[kPhaseNames[p]];
    auto& peaks = rec.memory[kPhaseNames[p]];
    for (int r = 0; r < world.size(); ++r) {
      times.push_back(per_rank[static_cast<size_t>(r) * mine.size() + static_cast<size_t>(p)]);
      peaks.push_back(per_rank[static_cast<size_t>(r) * mine.size() + kPhases + static_cast<size_t>(p)]);
    }
  }
  for (const EvalMetrics& e : evals) rec.evals.push_back({e.iteration, e.named()});
  const bool store = rollouts_every > 0 && ((it.index + 1) % rollouts_every == 0 || it.index == 0);
  const RolloutRecord ro = store ? rollouts_of(it) : RolloutRecord{};
  run_file->append(rec, store ? &ro : nullptr);
}

}  // namespace quartet
