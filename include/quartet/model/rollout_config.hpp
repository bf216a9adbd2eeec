#pragma once
// The deck's [rollout] section: the prompts, how many a batch takes, and how they are generated
// and scored (model/generation.hpp, model/paged_generation.hpp; rl/rollout_generator.hpp).
#include <string>
#include <vector>

#include "quartet/core/settings.hpp"

namespace quartet {

struct RolloutConfig {          // [rollout]
  std::string prompts;          // JSONL file, one {"prompt": "..."} per line, or pre-tokenised HDF5
  std::string prompt_field = "prompt";  // the JSONL field holding the prompt text
  int batch = 8;                // prompts per generation batch and rank
  int micro_batch = 0;          // prompts per generation chunk (0 = the whole batch): chunk c is
                                // scored by the other groups while chunk c + 1 is generated
  int score_micro_batch = 0;    // sequences per scoring forward and rank (0 = a whole chunk, as
                                // the memory plan counts it); OpenRLHF's micro_rollout_batch_size
  int score_tokens = 0;         // packed scoring: sequences back to back without padding, up to
                                // this many tokens a pass and rank (0 = score_micro_batch rows)
  int max_prompt_tokens = 128;  // longest prompt, in tokens (sizes the KV cache and the plan)
  int max_new_tokens = 16;
  int min_new_tokens = 0;       // no stop token (EOS included) before this many new tokens
  double temperature = 1.0;     // 0 = greedy
  int top_k = 0;                // 0 = off
  double top_p = 1.0;           // 1 = off
  std::vector<std::string> stop;  // stop tokens (token strings); the model's EOS ids always stop
  // The actor's old log-probs continue from generation's KV cache (the prompt is not run a
  // second time; engine/experience.hpp score_logprobs_on_cache) instead of a full forward pass.
  // Faster; the log-probs then differ from the full pass's by rounding, and share the
  // sampler's rounding on the prompt (docs/training.md: "Old log-probs on generation's cache").
  bool reuse_prompt_cache = false;
  // Continuous batching over a paged KV cache (model/paged_generation.hpp; docs/generation.md):
  // at most decode_rows sequences decode at once and a finished one's row takes the next
  // waiting sequence (0 = every sequence of a chunk at once, over a contiguous cache); the
  // cache is a pool of kv_cache_tokens slots (0 = decode_rows sequences of max_prompt_tokens +
  // max_new_tokens) in blocks of kv_block slots, shared by a prompt's samples.
  int decode_rows = 0;
  int kv_block = 16;
  int kv_cache_tokens = 0;
  // Not a key: completions per prompt, algorithm.samples_per_prompt (rl/algorithm_config.hpp),
  // which multiplies the batch's rows: the rollout's shape as generation and the memory plan see it.
  int samples_per_prompt = 1;
};

const Section<RolloutConfig>& rollout_section();

}  // namespace quartet
