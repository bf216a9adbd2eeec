#pragma once
// The [eval] section: the policy measured on held-out prompts while it trains, every
// eval.every iterations, after the last one (eval.at_end) and before the first (eval.at_start).
//
// Each actor rank takes its share of the first eval.count prompts (actor-group rank r of R: the
// prompts r, r + R, r + 2R, ...), drawn once when the run starts, and generates with the actor's
// gathered weights: one greedy completion of each, and eval.samples sampled ones at
// eval.temperature (the rollout's top-k, top-p, min_new_tokens and stop tokens apply to both),
// at most eval.max_new_tokens long, in passes of as many rows as one generation chunk of the
// rollout has (what the memory plan counts). The run's reward scores them (EvalRewards: the
// rule on the actor ranks, or the reward model on its ranks, as training's score phase), and
// the numbers are summed over the world (rl/eval_metrics.hpp).
//
// The sampling seed of an evaluation comes from run.seed, the iteration, the rank and the
// pass alone, and generation draws from a generator of its own (model/generation.hpp): the
// training's random streams, its prompts and its numbers are the same with eval on or off, and
// a resumed run evaluates as the uninterrupted one did.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/rl/eval_metrics.hpp"
#include "quartet/rl/prompt_dataset.hpp"

namespace quartet {

// The evaluation's completions on an actor rank, as the reward sees them.
struct EvalRows {
  RolloutBatch batch;  // the rows as rollouts (every rank of the actor group has one, maybe of 0 rows)
  std::vector<std::string> prompts, completions, answers;
  std::vector<std::string> records;  // each prompt's whole JSONL row (DatasetPrompt::record)
  std::vector<int64_t> indices;      // each prompt's index in eval.prompts
};

// One score per row of `rows`, from the run's reward. Called on every rank at once: a reward
// model's ranks serve the actor ranks' rows (elsewhere `rows` is empty and nothing comes back).
using EvalRewards = std::function<std::vector<double>(const EvalRows& rows)>;

// This actor rank's share of the first `count` prompts of `dataset` (0 = all), drawn now:
// plain prompts are tokenised and checked against the dataset's max_tokens here, so that a bad
// row stops the run before it trains. A DeckError names eval.count when the file has fewer.
std::vector<DatasetPrompt> eval_share(const Config& config, const PromptDataset& dataset, int group_rank,
                                      int group_size);

class Evaluator {
 public:
  // Every rank. `actor`: this rank's actor model (null off the actor ranks, where `prompts` is
  // empty). `sampling`: the run's sampling settings (stop ids, pad id, vocabulary limit).
  // `decode`: the completions' text of a batch. `world`: the metrics are summed over it.
  Evaluator(const Config& config, RoleModel* actor, std::vector<DatasetPrompt> prompts, SamplingParams sampling,
            std::function<std::vector<std::string>(const RolloutBatch&)> decode, EvalRewards rewards, int world_rank,
            MPI_Comm world);

  // Whether an evaluation is taken when `done` iterations are done (0: before the first).
  bool due(int done) const;
  // Every rank at once: generation (actor ranks), the reward (every rank), the world's numbers.
  EvalMetrics evaluate(int done);

 private:
  // Every prompt of this rank `copies` times, generated in passes; returns the pieces.
  std::vector<RolloutBatch> generate_rows(int copies, const SamplingParams& sp, int done, int part);
  EvalRows rows_of(const std::vector<RolloutBatch>& greedy, const std::vector<RolloutBatch>& sampled) const;

  const Config& config_;
  RoleModel* actor_;
  std::vector<DatasetPrompt> prompts_;
  SamplingParams sampling_;
  std::function<std::vector<std::string>(const RolloutBatch&)> decode_;
  EvalRewards rewards_;
  int world_rank_;
  MPI_Comm world_;
  int64_t rows_per_pass_;
  int64_t max_width_;
};

}  // namespace quartet
