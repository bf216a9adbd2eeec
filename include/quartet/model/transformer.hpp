#pragma once
// Decoder-only transformers in LibTorch with the three heads RLHF needs, under Hugging Face's
// weight names so HF checkpoints load and export unchanged:
//   causal_lm        - logits [B, T, V]   (actor, reference)     ~ *ForCausalLM
//   token_value      - values [B, T]      (critic)               ~ *ForTokenClassification, num_labels=1
//   sequence_reward  - scores [B], at the last non-pad token (reward) ~ *ForSequenceClassification, num_labels=1
// Batches are left-padded: attention_mask [B, S] is 1 for tokens and 0 for padding, where S
// covers the cached tokens plus the new ones; position ids count real tokens only, so a padded
// batch gives the same results as its sequences one by one.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "quartet/model/model_config.hpp"
#include "quartet/model/packed_sequences.hpp"
#include "quartet/model/paged_cache.hpp"
#include "quartet/model/safetensors.hpp"

namespace quartet {

enum class Head { causal_lm, token_value, sequence_reward };
const char* head_name(Head head);
// The Hugging Face class of a model_type with a head: LlamaForCausalLM, GPT2LMHeadModel,
// Qwen2ForTokenClassification, ... (GPTJForTokenClassification is quartet's own: HF has none).
std::string architecture_name(const ModelConfig& config, Head head);

// Keys and values of every layer for incremental decoding, preallocated for max_len tokens.
struct KVCache {
  std::vector<torch::Tensor> k, v;  // per layer [B, kv_heads, max_len, head_dim]
  int64_t length = 0;               // tokens already cached
  int64_t max_len = 0;
};

// Where a batch's padding lies (attention_mask's zeros), as the caller knows it (engine/experience.hpp
// padding_layout() finds it for rollouts). Where no row has padding before a real token,
// causality alone hides all padding from every real token, and attention runs without a mask
// (SDPA's is_causal, as HF's SDPA path does for an all-ones mask): the fused kernels then skip
// the future's tiles instead of reading a [B, 1, T, S] mask, about half the work. Left-padded
// prompts get the same by a shift: each row's leading padding moves behind it (positions count
// real tokens, so they do not change), the model runs causally, and the hidden states move
// back. Real tokens get the same outputs either way; padded positions' outputs differ (they
// see the padding before them) and are not meant to be read.
enum class PaddingLayout {
  anywhere,  // no promise: the mask
  trailing,  // every row: real tokens, then padding (ones, then zeros)
  around,    // every row: padding, real tokens, padding (a left-padded prompt, a stopped answer)
};

class TransformerImpl : public torch::nn::Module {
 public:
  TransformerImpl(const ModelConfig& config, Head head);
  // Parameters created with `options` (dtype, device); random_init = false leaves them
  // uninitialised, for a model whose weights are loaded next.
  TransformerImpl(const ModelConfig& config, Head head, const torch::TensorOptions& options,
                  bool random_init);

  // input_ids [B, T] (int64); attention_mask [B, S] with S = cache length + T (or T without a
  // cache). With a cache, the new keys and values are appended and cache->length advances.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        KVCache* cache = nullptr);
  KVCache make_cache(int64_t batch, int64_t max_len) const;
  // A paged cache (paged_cache.hpp) of `blocks` pool blocks (the scratch block included) of
  // block_size slots, for `rows` decoding rows of up to max_blocks blocks each: zeroed pool,
  // every row idle (table zeros, context 0).
  PagedKV make_paged_cache(int64_t rows, int64_t max_blocks, int64_t blocks, int64_t block_size) const;
  // forward() in two halves: the final-normed hidden states [B, T, hidden], then the head
  // (attention_mask as given to hidden_states; sequence_reward reads it). `padding` (without
  // a cache) is the caller's promise of where the mask's zeros lie (PaddingLayout).
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                              KVCache* cache = nullptr, PaddingLayout padding = PaddingLayout::anywhere);
  torch::Tensor head_output(const torch::Tensor& hidden, const torch::Tensor& attention_mask);
  // hidden_states over packed sequences (packed_sequences.hpp): [1, N, hidden], each sequence's
  // tokens as its own unpadded row would give them, to rounding.
  torch::Tensor packed_hidden_states(const PackedSequences& packed);
  // The packed pass's keys and values into a paged cache, without the head: packed token i's
  // go to pool slot slots[i] (int64 [N] on the device, an index into a layer's pool seen as
  // [blocks * block_size, kv_heads, head_dim]). A paged decoder's prompts, unpadded.
  void fill_paged(const PackedSequences& packed, PagedKV& cache, const torch::Tensor& slots);
  // The head at chosen tokens of packed hidden states [1, N, hidden]: at [M] (int64 indices
  // into N), [1, M, V] logits (causal_lm) or [1, M] values or scores (token_value, and
  // sequence_reward at each sequence's last token).
  torch::Tensor head_at(const torch::Tensor& hidden, const torch::Tensor& at);
  // causal_lm only: logits [B, V] of the last position, without the [B, T, V] of the others.
  torch::Tensor next_token_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                  KVCache* cache = nullptr);
  // causal_lm only: one decoding step with static shapes, the form a CUDA graph can capture
  // (generation.cpp). Row r (of the first B rows of `cache`) feeds token ids[r] at position
  // positions[r] into cache slot `slot` (a one-element int64 tensor on the device, the same
  // slot for every row) and attends to the slots s < span where key_valid[r, s] is true (the
  // caller marks `slot` itself before the step). Returns logits [B, V]. Nothing is read back
  // to the host. host_length is the sequence length so far when the caller knows it on the
  // host (needed only by dynamic rotary scaling past max_position_embeddings), else -1.
  torch::Tensor decode_step(const torch::Tensor& ids, const torch::Tensor& positions, const torch::Tensor& slot,
                            const torch::Tensor& key_valid, KVCache& cache, int64_t span, int64_t host_length = -1);
  // decode_step over a paged cache: row r (of cache.table's rows) feeds ids[r] at position
  // positions[r] into its slot cache.context[r] - 1 and attends to its slots below
  // cache.context[r] (none, and no write, for an idle row: its logits are not meant to be read).
  // span bounds every row's context this step (the attention's work where it runs on ATen).
  torch::Tensor decode_step_paged(const torch::Tensor& ids, const torch::Tensor& positions, PagedKV& cache,
                                  int64_t span);
  // True when decode_step's rotary tables depend on the host-side length (dynamic scaling
  // beyond max_position_embeddings within max_len tokens): such a step cannot be captured.
  bool decode_needs_host_length(int64_t max_len) const;
  // Recompute each block's activations in backward instead of keeping them (saves memory).
  void set_activation_checkpointing(bool on);

  // How block `layer` is run on the hidden states x: by default fn(x) directly (or checkpointed,
  // see above). A sharded engine installs its own runner, which gathers the block's parameters
  // around the call and reduce-scatters their gradients (shard/sharded_model.hpp); the runner
  // then decides about checkpointing too. An empty runner restores the default.
  using BlockFn = std::function<torch::Tensor(const torch::Tensor&)>;
  using BlockRunner = std::function<torch::Tensor(int64_t layer, const BlockFn& fn, const torch::Tensor& x)>;
  void set_block_runner(BlockRunner runner);
  // The Hugging Face name prefix of block `layer`'s parameters, e.g. "model.layers.3.".
  std::string block_prefix(int64_t layer) const;

  const ModelConfig& config() const { return config_; }
  Head head() const { return head_; }
  // Every parameter under its Hugging Face name (tied embeddings appear once, as HF saves them).
  NamedTensors hf_state() const;
  // Copies every weight from the checkpoint by model/weight_map.hpp's rules; a missing,
  // unexpected, misshapen or integer tensor is a quartet::Error naming the tensors and the
  // checkpoint directory.
  void load_hf(const SafetensorsCheckpoint& checkpoint);
  // head_from_checkpoint = false: a head the checkpoint does not hold whole keeps its current
  // weights and the checkpoint's other head tensors are not read (a critic started from a
  // causal LM). Returns the parameters that kept their weights.
  std::vector<std::string> load_hf(const SafetensorsCheckpoint& checkpoint, bool head_from_checkpoint);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  ModelConfig config_;
  Head head_;
};
TORCH_MODULE(Transformer);

// A model directory (config.json + safetensors) loaded with the given head, dtype and device.
Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype,
                       torch::Device device);
// head_from_checkpoint = false: a head the checkpoint lacks is freshly initialised
// (normal(0, initializer_range), zero bias), and other heads' tensors in it are not read.
Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype,
                       torch::Device device, bool head_from_checkpoint);
// config.json (with the head's architecture name) and safetensors, as HF would save them.
void save_model(const Transformer& model, const std::string& dir);

}  // namespace quartet
