#pragma once
// Sampling from a causal LM with a preallocated KV cache: the prompt in one forward pass, then
// one token per step for every live sequence until max_new_tokens or a stop token.
//
// Every decoding step has static shapes (Transformer::decode_step): the step's slot, positions,
// attention mask and sampled tokens live in device tensors updated in place, so on a GPU the
// step (forward, sampling, bookkeeping) is captured once as a CUDA graph and replayed. The
// host reads nothing back per token; only every check_every steps it asks how many sequences
// are still live (the answer read check_lag steps later, so the host never waits on the
// device), stops when none is, and moves the live ones to the front of a smaller batch
// (a power-of-two bucket, each with its own graph) once at least half have finished. Graphs
// are also kept per attention span (a multiple of span_bucket slots), so early steps do not
// read the whole cache. On the CPU the same step runs eagerly.
#include <cstdint>
#include <utility>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/model/transformer.hpp"

namespace quartet {

struct SamplingParams {
  double temperature = 1.0;   // 0 = greedy
  int64_t top_k = 0;          // 0 = off
  double top_p = 1.0;         // 1 = off
  int64_t max_new_tokens = 16;
  // Before this many new tokens the stop ids are not sampled (their logits are -inf), as HF
  // generate's min_new_tokens does for EOS. Log-probs taken later (engine/experience.hpp) do not
  // see this mask, as they do not see top-k or top-p.
  int64_t min_new_tokens = 0;
  std::vector<int64_t> stop_ids;  // a sequence ends after emitting one of these
  int64_t pad_id = 0;             // fills the steps after a sequence ended
  uint64_t seed = 1;
  // Only ids below this are sampled (0 = every id of the model's vocabulary): a model whose
  // vocabulary is larger than its tokenizer's (a random model of a real size, or an embedding
  // padded to a multiple of 64) never emits an id the tokenizer cannot decode.
  int64_t vocab_limit = 0;
  // Execution only (the tokens do not depend on these, except through floating-point
  // rounding): capture the decoding step as a CUDA graph on CUDA devices; steps between
  // host checks (stop, shrink the batch); the steps between a check's count leaving the device
  // and the host acting on it (0: the host waits for it, and the device drains at every
  // check; more: the copy lands while the device works through the steps queued behind it);
  // the attention span's granularity in slots. Checks start once a stop is possible (after
  // min_new_tokens tokens).
  bool cuda_graphs = true;
  int64_t check_every = 8;
  int64_t check_lag = 2;
  int64_t span_bucket = 64;
  // Hand the KV cache back (Generation::cache): every row's prompt keys and values, in the
  // caller's row order, for a forward pass that continues from the prompt instead of running
  // it again (engine/experience.hpp score_logprobs_on_cache). A batch cut to its live rows then
  // moves the finished ones behind them instead of overwriting them. cache_slots: the cache
  // holds at least this many slots (that pass may run over a wider, padded batch).
  bool keep_cache = false;
  int64_t cache_slots = 0;
  // The batch's rows come in groups of this many identical prompts (GRPO's samples of a
  // prompt, side by side): the prompt's forward pass runs once per group and its keys, values
  // and last logits are copied to the group's other rows. 1 (or a size that does not divide
  // the batch) = one pass per row. The tokens are those of one pass per row, up to rounding.
  int64_t prompt_group = 1;
  // Continuous batching over a paged KV cache (model/paged_generation.hpp): at most decode_rows
  // sequences decode at once, and a row whose sequence ended takes the next waiting one (0: every
  // row of the batch at once, over one contiguous cache of T + N slots a row). The cache is a
  // pool of kv_cache_tokens slots (0: decode_rows sequences of T + N tokens) in blocks of
  // kv_block slots; a prompt's blocks are shared by its group's rows. Not with keep_cache.
  int64_t decode_rows = 0;
  int64_t kv_block = 16;
  int64_t kv_cache_tokens = 0;
};

// The deck's [rollout] sampling settings (temperature, top_k, top_p, max_new_tokens,
// min_new_tokens); the caller adds the stop ids, the pad id, the vocabulary limit and the seed.
SamplingParams sampling_params(const RolloutConfig& rollout);

// What the decoder did, for benchmarks and tests.
struct GenerationStats {
  int64_t steps = 0;             // decoding steps run (the prompt's forward pass not counted)
  int64_t graph_replays = 0;     // steps run as a CUDA graph replay
  int64_t graphs_captured = 0;
  int64_t compactions = 0;       // times the live sequences moved to a smaller batch
  int64_t checks = 0;            // live counts the host read back (and acted on)
  int64_t row_steps = 0;         // sum over steps of the batch rows computed
  double capture_seconds = 0;    // host time spent capturing (and warming up) graphs
  // Paged decoding (decode_rows > 0): sequences that took a row another one had left; rows
  // whose sequence was stopped and put back in the queue because the pool ran out of blocks
  // (it restarts from its prompt); the most pool blocks in use at once, and the pool's blocks.
  int64_t refills = 0;
  int64_t preemptions = 0;
  int64_t peak_blocks = 0;
  int64_t pool_blocks = 0;
};

struct Generation {
  torch::Tensor tokens;          // [B, T + N]: the left-padded prompt, then the new tokens
  torch::Tensor attention_mask;  // [B, T + N]: 1 for prompt and generated tokens up to the stop
  torch::Tensor new_lengths;     // [B]: generated tokens per sequence, the stop token included
  GenerationStats stats;
  // keep_cache only: max_len max(T + N, cache_slots), length T, slots [0, T) holding each
  // row's prompt as the prompt's forward pass wrote them; later slots are the decoder's
  // scratch. No layers otherwise, or when nothing was generated.
  KVCache cache;
};

// Token lists as one left-padded batch: ids [B, T] (pad_id in the padding) and mask [B, T]
// (1 for tokens), T the longest list (at least 1).
std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& seqs, int64_t pad_id);

// prompt [B, T] left-padded, prompt_mask [B, T]. Deterministic for a given seed and device
// (and, on CUDA, for the same cuda_graphs setting: a graph draws its random numbers from
// another offset of the generator's stream). Sampling draws one exponential variate per
// vocabulary entry and takes argmax(p / E), which picks each token with probability p.
Generation generate(Transformer& model, const torch::Tensor& prompt,
                    const torch::Tensor& prompt_mask, const SamplingParams& params);

}  // namespace quartet
