#include "quartet/tune/stage_plan.hpp"

namespace quartet {

bool is_sft_deck(const Config& config) { return config.sft.enabled(); }

Config stage_plan_config(const Config& config) {
  if (!is_sft_deck(config)) return config;
  Config c = config;
  const SftConfig& s = config.sft;
  c.rollout.max_prompt_tokens = s.max_tokens - 1;
  c.rollout.max_new_tokens = 1;
  c.rollout.min_new_tokens = 0;
  c.rollout.batch = s.batch;
  c.rollout.micro_batch = 0;
  c.algorithm.samples_per_prompt = 1;
  if (s.micro_batch_tokens > 0) c.train.micro_batch = (s.micro_batch_tokens + s.max_tokens - 1) / s.max_tokens;
  c.rollout.score_micro_batch = c.train.micro_batch;
  return c;
}

}  // namespace quartet
