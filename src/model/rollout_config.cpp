#include "quartet/model/rollout_config.hpp"

namespace quartet {

namespace {

using R = RolloutConfig;

// What the rollout's keys say together.
void check_rollout(const Deck& deck, R& r) {
  const int sequence = r.max_prompt_tokens + r.max_new_tokens;
  if (r.kv_cache_tokens != 0 && r.kv_cache_tokens < sequence)
    deck.fail("rollout.kv_cache_tokens", "must be 0 or at least max_prompt_tokens + max_new_tokens (" +
                                             std::to_string(sequence) + "), the slots of one whole sequence");
  if (r.decode_rows > 0 && r.reuse_prompt_cache)
    deck.fail("rollout.decode_rows", "cannot be combined with rollout.reuse_prompt_cache = true: the paged cache is "
                                     "not handed to the old log-probs' pass");
  if (r.min_new_tokens < 0 || r.min_new_tokens > r.max_new_tokens)
    deck.fail("rollout.min_new_tokens", "must be in 0 .. rollout.max_new_tokens (" + std::to_string(r.max_new_tokens) + ")");
  r.samples_per_prompt = deck.get<int>("algorithm.samples_per_prompt");
}

}  // namespace

const Section<RolloutConfig>& rollout_section() {
  static const Section<R> section("rollout", "Prompts and sampling", {
      key("prompts", &R::prompts, readable_file_or_empty(), "prompts file: JSONL, one {\"prompt\": \"...\"} per line, or one inputs/prepare/prepare_prompts.py wrote (token ids made for the actor's tokenizer and chat template: docs/data.md), or pre-tokenised HDF5"),
      key("prompt_field", &R::prompt_field, "plain JSONL field with the prompt text (a prepared file's is always prompt)"),
      key("batch", &R::batch, at_least(1), "prompts per generation batch and rank (count, >= 1)"),
      key("micro_batch", &R::micro_batch, at_least(0), "prompts per generation chunk and rank (0 = the whole batch); the scoring groups score chunk c while chunk c+1 is generated"),
      key("score_micro_batch", &R::score_micro_batch, at_least(0), "sequences per scoring forward pass (log-probs, values, rewards) and rank (0 = a whole generation chunk)"),
      key("score_tokens", &R::score_tokens, at_least(0), "packed scoring: each pass holds consecutive sequences back to back without padding, up to this many tokens and rank (a longer sequence alone), each attending within itself only, so that its cost follows the tokens (0 = padded passes of score_micro_batch sequences)"),
      key("max_prompt_tokens", &R::max_prompt_tokens, at_least(1), "longest prompt in tokens (count, >= 1)"),
      key("max_new_tokens", &R::max_new_tokens, at_least(1), "tokens generated at most per prompt (count, >= 1)"),
      key("min_new_tokens", &R::min_new_tokens, "no stop token (EOS included) is sampled before this many new tokens (count, 0 .. max_new_tokens), as HF generate's min_new_tokens"),
      key("temperature", &R::temperature, at_least(0.0), "sampling temperature (>= 0; 0 = greedy)"),
      key("top_k", &R::top_k, at_least(0), "sample from the k likeliest tokens (count; 0 = off)"),
      key("top_p", &R::top_p, Check<double>([](const double& p) { return p > 0 && p <= 1 ? "" : "must be in (0, 1]"; }), "nucleus sampling mass (0 < p <= 1; 1 = off)"),
      list("stop", &R::stop, "comma-separated stop tokens (token strings); the model's EOS ids always stop"),
      key("decode_rows", &R::decode_rows, at_least(0), "continuous batching over a paged KV cache: at most this many sequences decode at once and rank, a finished sequence's row taking the next waiting one, so that the batch stays full while answer lengths differ (0 = every sequence of a generation chunk at once, over a contiguous cache of max_prompt_tokens + max_new_tokens slots a sequence); not with reuse_prompt_cache"),
      key("kv_block", &R::kv_block, at_least(1), "paged KV cache (decode_rows > 0): slots per block (count, >= 1)"),
      key("kv_cache_tokens", &R::kv_cache_tokens, "paged KV cache (decode_rows > 0): the pool's slots, shared by the rows as their sequences grow; when it runs out the youngest rows restart later (0 = decode_rows x (max_prompt_tokens + max_new_tokens), which never runs out; else at least max_prompt_tokens + max_new_tokens)"),
      key("reuse_prompt_cache", &R::reuse_prompt_cache, "the actor's old log-probs continue from generation's KV cache instead of running the prompt again (faster; equal to the full pass to rounding, which in bf16 leans towards the sampler's: a KL of about 2e-4 a token where actor and reference are equal)"),
  }, check_rollout);
  return section;
}

}  // namespace quartet
