#include "quartet/tune/stage_plan.hpp"

#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/dpo_config.hpp"
#include "quartet/tune/rm_config.hpp"
#include "quartet/tune/sft_config.hpp"

namespace quartet {

bool is_sft_deck(const Config& config) { return config.get<SftConfig>().enabled(); }
bool is_dpo_deck(const Config& config) { return config.get<DpoConfig>().enabled(); }
bool is_rm_deck(const Config& config) { return config.get<RmConfig>().enabled(); }

int64_t widest_pair_batch(const Config& config) { return 2 * (int64_t(config.get<RmConfig>().stage.max_tokens) - 1); }

namespace {

// Sequences of `max_tokens` tokens, `batch` of them per step and rank, `micro_batch` per pass.
Config with_stage_shapes(const Config& config, int max_tokens, int batch, int micro_batch) {
  Config c = config;
  c.edit<RolloutConfig>().max_prompt_tokens = max_tokens - 1;
  c.edit<RolloutConfig>().max_new_tokens = 1;
  c.edit<RolloutConfig>().min_new_tokens = 0;
  c.edit<RolloutConfig>().batch = batch;
  c.edit<RolloutConfig>().micro_batch = 0;
  c.edit<RolloutConfig>().samples_per_prompt = 1;
  c.edit<TrainConfig>().micro_batch = micro_batch;
  c.edit<RolloutConfig>().score_micro_batch = micro_batch;
  return c;
}

Config rm_plan_config(const Config& config) {
  Config c = config;
  const int sides = 2 * config.get<TrainConfig>().micro_batch;  // a micro-batch's pairs, chosen and rejected rows
  c.edit<RolloutConfig>().max_prompt_tokens = config.get<RmConfig>().stage.max_tokens - 1;
  c.edit<RolloutConfig>().max_new_tokens = config.get<RmConfig>().stage.max_tokens - 1;
  c.edit<RolloutConfig>().min_new_tokens = 0;
  c.edit<RolloutConfig>().batch = sides;
  c.edit<RolloutConfig>().micro_batch = 0;
  c.edit<RolloutConfig>().samples_per_prompt = 1;
  c.edit<TrainConfig>().micro_batch = sides;
  c.edit<RolloutConfig>().score_micro_batch = sides;
  return c;
}

}  // namespace

Config stage_plan_config(const Config& config) {
  if (is_sft_deck(config)) {
    const SftConfig& s = config.get<SftConfig>();
    const int micro = s.micro_batch_tokens > 0 ? (s.micro_batch_tokens + s.stage.max_tokens - 1) / s.stage.max_tokens
                                               : config.get<TrainConfig>().micro_batch;
    return with_stage_shapes(config, s.stage.max_tokens, s.stage.batch, micro);
  }
  if (is_dpo_deck(config)) {
    // Both sides of train.micro_batch pairs in one pass: twice as many sequences.
    const DpoConfig& d = config.get<DpoConfig>();
    return with_stage_shapes(config, d.stage.max_tokens, 2 * d.stage.batch, 2 * config.get<TrainConfig>().micro_batch);
  }
  if (is_rm_deck(config)) return rm_plan_config(config);
  return config;
}

}  // namespace quartet
