#include "quartet/tune/stage_plan.hpp"

namespace quartet {

bool is_sft_deck(const Config& config) { return config.sft.enabled(); }
bool is_dpo_deck(const Config& config) { return config.dpo.enabled(); }
bool is_rm_deck(const Config& config) { return config.rm.enabled(); }

int64_t widest_pair_batch(const Config& config) { return 2 * (int64_t(config.rm.max_tokens) - 1); }

namespace {

// Sequences of `max_tokens` tokens, `batch` of them per step and rank, `micro_batch` per pass.
Config with_stage_shapes(const Config& config, int max_tokens, int batch, int micro_batch) {
  Config c = config;
  c.rollout.max_prompt_tokens = max_tokens - 1;
  c.rollout.max_new_tokens = 1;
  c.rollout.min_new_tokens = 0;
  c.rollout.batch = batch;
  c.rollout.micro_batch = 0;
  c.algorithm.samples_per_prompt = 1;
  c.train.micro_batch = micro_batch;
  c.rollout.score_micro_batch = micro_batch;
  return c;
}

Config rm_plan_config(const Config& config) {
  Config c = config;
  const int sides = 2 * config.train.micro_batch;  // a micro-batch's pairs, chosen and rejected rows
  c.rollout.max_prompt_tokens = config.rm.max_tokens - 1;
  c.rollout.max_new_tokens = config.rm.max_tokens - 1;
  c.rollout.min_new_tokens = 0;
  c.rollout.batch = sides;
  c.rollout.micro_batch = 0;
  c.algorithm.samples_per_prompt = 1;
  c.train.micro_batch = sides;
  c.rollout.score_micro_batch = sides;
  return c;
}

}  // namespace

Config stage_plan_config(const Config& config) {
  if (is_sft_deck(config)) {
    const SftConfig& s = config.sft;
    const int micro = s.micro_batch_tokens > 0 ? (s.micro_batch_tokens + s.max_tokens - 1) / s.max_tokens
                                               : config.train.micro_batch;
    return with_stage_shapes(config, s.max_tokens, s.batch, micro);
  }
  if (is_dpo_deck(config)) {
    // Both sides of train.micro_batch pairs in one pass: twice as many sequences.
    const DpoConfig& d = config.dpo;
    return with_stage_shapes(config, d.max_tokens, 2 * d.batch, 2 * config.train.micro_batch);
  }
  if (is_rm_deck(config)) return rm_plan_config(config);
  return config;
}

}  // namespace quartet
