#pragma once
// One iteration into run.h5 (io/run_file.hpp): its metrics, every rank's time and peak memory
// per phase, and, every output.rollouts_every iterations (and the first), the actor ranks'
// rollouts with their scores, log-probs, values, advantages, returns and text; and the
// evaluations taken in it ([eval], /eval).
#include "quartet/dist/world.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/io/run_file.hpp"
#include "quartet/rl/eval_metrics.hpp"
#include "quartet/rl/iteration.hpp"
#include "quartet/rl/iteration_metrics.hpp"

namespace quartet {

// Collective over the world (the per-rank times and peaks are gathered); the actor ranks, which
// hold `run_file`, then append collectively over the actor group. Other ranks pass null.
void record_iteration(RunFile* run_file, const World& world, const Iteration& it, const IterationMetrics& metrics,
                      const PhaseClock& clock, const AlgorithmSpec& algorithm, int rollouts_every,
                      const std::vector<EvalMetrics>& evals = {});

}  // namespace quartet
