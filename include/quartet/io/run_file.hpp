#pragma once
// The run file, <run.out>/run.h5: everything a run produces, for analysis after the run and
// watching during it. Layout (all names fixed; postprocess/quartet_run.py reads exactly this):
//
//   /                       attributes: software = "quartet", version, git_commit, deck (the
//                           resolved deck text), start_time (ISO 8601, UTC), world_size,
//                           placement (e.g. "actor ranks 0-3 | critic ranks 4-5 | ..."),
//                           algorithm, iterations_planned (int64),
//                           iterations_complete (int64): the iterations whose every dataset
//                           is written; a reader must ignore anything beyond it.
//   /metrics/<name>         float64 [n], one value per iteration, extendible, chunked.
//   /metrics/iteration      int64 [n]: the iteration number (1-based) of each row; the key
//                           when a resumed run appends (an iteration is never written twice).
//   /timing/<phase>         float64 [n, world_size]: seconds of each phase per iteration and
//                           rank (phases: generate, score, advantages, train).
//   /memory/<phase>         float64 [n, world_size]: peak device bytes per phase, iteration
//                           and rank (0 on CPU runs: not measured).
//   /memory/plan            float64 [world_size]: each rank's planned peak device bytes.
//   /eval/<metric>          float64 [m], one value per evaluation ([eval], rl/evaluator.hpp),
//                           extendible, chunked: greedy_pass@1, greedy_reward, greedy_length,
//                           prompts, and with eval.samples > 0 sample_pass@1, pass@<k> for each
//                           eval.k, sample_reward, sample_length, samples.
//   /eval/iteration         int64 [m]: the iterations done when each was taken (0 = before the
//                           first), increasing; an evaluation is written with the iteration it
//                           follows (one at 0 with iteration 1), so rows whose iteration is past
//                           iterations_complete are to be ignored like the other series'.
//   /rollouts/<iteration>   a group every output.rollouts_every iterations (name: the iteration
//                           number, zero-padded to 6 digits), written collectively by the actor
//                           group, each rank its rows (hyperslab) in actor-rank order:
//       sequences int64 [B, L], attention_mask int8 [B, L], action_mask int8 [B, A],
//       scores float32 [B], logprobs, ref_logprobs, values, advantages, returns float32 [B, A]
//       (ref_logprobs and values only when the run has them), prompt and completion
//       (variable-length UTF-8 strings [B]); attribute prompt_length (int64, = L - A).
//
// Consistency for a reader while the run goes on: the file is opened, written and closed every
// iteration (by the actor group, collectively, with parallel HDF5), and iterations_complete is
// raised last, just before the close. A reader that opens the file meanwhile either fails to
// open it (and retries) or sees every iteration up to iterations_complete complete.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/types.h>

namespace quartet {

struct RunFileInfo {
  std::string version, git_commit, deck, placement, algorithm;
  std::string run_id;  // the run's identity, as its checkpoints carry it (engine/training_checkpoint.hpp)
  // One line per model read from a directory: "actor = <as the deck gave it> -> <directory>"
  // (an hf: path's snapshot, whose folder name is the commit).
  std::string model_paths;
  std::int64_t world_size = 1, iterations_planned = 0;
};

// The rows this rank contributes to a rollouts group.
struct RolloutRecord {
  std::int64_t iteration = 0;
  torch::Tensor sequences, attention_mask, action_mask, scores, logprobs, ref_logprobs, values, advantages, returns;
  std::vector<std::string> prompts, completions;
};

// One evaluation's numbers (/eval): taken when `iteration` iterations were done.
struct EvalRecord {
  std::int64_t iteration = 0;
  std::map<std::string, double> metrics;
};

// One iteration's numbers: metrics (same names every iteration), and per phase each rank's
// time and peak bytes (already gathered: [world_size] per phase); the evaluations taken in it.
struct IterationRecord {
  std::int64_t iteration = 0;  // 1-based
  std::map<std::string, double> metrics;
  std::map<std::string, std::vector<double>> timing, memory;
  std::vector<EvalRecord> evals;
};

class RunFile {
 public:
  // Collective over `comm` (the actor group). Creates <dir>/run.h5, or opens an existing one
  // to append (a resumed run); an existing file that is not a quartet run file, or is
  // truncated, is a quartet::Error naming it.
  RunFile(const std::string& dir, MPI_Comm comm, const RunFileInfo& info, const std::vector<double>& planned_memory);

  // Collective: appends one iteration (rank 0 of comm writes the numbers; every rank passes
  // the same record) and, when `rollouts` is given, every rank's rows; raises
  // iterations_complete. An iteration already in the file is skipped (resume).
  void append(const IterationRecord& record, const RolloutRecord* rollouts);

  // Collective: forgets the iterations after `iterations` (a run resumed from an earlier
  // checkpoint writes them again): iterations_complete drops first, then the series shrink and
  // the rollouts and evaluations of those iterations go. Nothing happens when the file holds no more.
  void rewind(std::int64_t iterations);

  // The iterations already complete in the file (a resumed run continues after them).
  std::int64_t iterations_complete() const { return complete_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MPI_Comm comm_;
  std::int64_t complete_ = 0;
  std::int64_t world_size_ = 1;
};

// The run_id attribute of the run file at `path` (read without the write lock: it is written
// once, when the file is made); "" when there is no such file, or it predates run_id.
std::string run_file_run_id(const std::string& path);

// `quartet inspect RUN.h5`: a summary of a run file (attributes, iterations, the last and best
// values of the main metrics, rollout groups), or a clear error for a foreign or damaged file.
std::string describe_run_file(const std::string& path);

}  // namespace quartet
