#pragma once
// The generate phase of `train`, on the actor ranks: draw rollout.batch prompts, sample
// algorithm.samples_per_prompt completions of each with the actor's full weights (gathered once
// for the phase: the hybrid engine), in chunks of rollout.micro_batch prompts. Each chunk goes
// to the scoring groups as soon as it exists, and then the actor takes its own log-probs of it
// (on generation's KV cache with rollout.reuse_prompt_cache).
#include <memory>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/engine/prompt_sampler.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/rl/iteration.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/scoring.hpp"

namespace quartet {

// How an iteration's prompts are cut into generation chunks.
struct ChunkLayout {
  int prompts_per_chunk = 1;
  int chunks = 1;
  int total = 1;
  explicit ChunkLayout(const RolloutConfig& rollout);
  int prompts_in(int chunk) const;
};

class RolloutGenerator {
 public:
  // `sampling`: the run's sampling settings (stop ids, pad id, vocabulary limit); the seed is
  // set per chunk. `rank`: this world rank (ranks sample differently).
  RolloutGenerator(const Config& config, RoleModel& actor, const PromptDataset& dataset, PromptSampler& sampler,
                   SamplingParams sampling, int rank);
  // Fills it.prompts, answers, chunks, batch and old_logp.
  void generate(Iteration& it, Scoring& scoring, const SamplingView& view, const ScorePasses& score_passes);

  // Since the run began: the seconds spent in generation proper (quartet::generate, to the
  // device's finish; not the old log-probs' pass of the same phase) and its decoding steps.
  double decode_seconds() const { return decode_seconds_; }
  int64_t decode_steps() const { return decode_steps_; }

 private:
  RolloutBatch generate_chunk(Iteration& it, int chunk, KVCache* cache);

  const Config& config_;
  RoleModel& actor_;
  const PromptDataset& dataset_;
  PromptSampler& sampler_;
  SamplingParams sampling_;
  int rank_;
  ChunkLayout layout_;
  int64_t max_width_;
  double decode_seconds_ = 0;
  int64_t decode_steps_ = 0;
};

}  // namespace quartet
