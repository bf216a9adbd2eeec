#pragma once
// The shape of a transformer, read from a Hugging Face config.json. Two families cover the
// models quartet trains: Llama-shaped (Llama, Mistral, Qwen2, Qwen3: RMSNorm, rotary, SwiGLU,
// grouped-query attention; Qwen3 adds an RMSNorm over each query and key head) and GPT-shaped
// (GPT-2, GPT-J, GPT-NeoX: LayerNorm, learned or rotary positions, GELU, parallel attention +
// MLP for GPT-J/NeoX). Anything else is refused by name: a model_type, an architecture, a rope
// type, per-layer-type rope parameters. Keys that change nothing quartet computes (dropout,
// use_cache, ...) are not read.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace quartet {

enum class Family { llama, gpt2, gptj, gpt_neox };

struct RopeScaling {
  std::string type = "none";          // none | linear | dynamic | llama3 (rope_scaling.rope_type)
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;    // llama3
  int64_t original_max_positions = 0;                       // llama3, dynamic
};

struct ModelConfig {
  std::string model_type;     // config.json "model_type": llama | mistral | qwen2 | qwen3 | gpt2 | gptj | gpt_neox
  Family family = Family::llama;
  std::string architecture;   // config.json "architectures"[0], "" when absent
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;   // = num_heads unless grouped-query attention
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;
  double norm_eps = 1e-5;
  // Rotary embeddings (llama, gptj, gpt_neox): dims rotated per head, base, scaling.
  int64_t rotary_dim = 0;     // 0 = learned absolute positions (gpt2)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // q/k/v biases for qwen2 (always); q/k/v/o biases for llama and qwen3 (attention_bias);
  // gpt2/neox have biases everywhere.
  bool attention_bias = false;
  // Qwen3's q_norm and k_norm: an RMSNorm (norm_eps) over head_dim of every query and key head,
  // after the projections and before the rotation. complete() sets it from model_type.
  bool qk_norm = false;
  bool mlp_bias = false;         // llama's mlp_bias (gate/up/down biases)
  bool parallel_residual = false;  // gptj always, gpt_neox by use_parallel_residual
  std::string activation = "silu";  // hidden_act / activation_function
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;  // every id of a list-valued eos_token_id (eos_token_id = the first)
  double initializer_range = 0.02;      // std of the random initialisation
  // Sliding-window attention (Mistral; Qwen2, Qwen3 with use_sliding_window): in a sliding layer a
  // query sees the keys fewer than sliding_window cache slots behind it (HF's masking_utils:
  // kv_idx > q_idx - sliding_window). 0 = no window. sliding_layers has one entry per layer;
  // complete() fills an empty one with "every layer" when sliding_window > 0 (Mistral's rule).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;

  // Throws quartet::Error naming the file and the key for a missing key, an unsupported
  // model_type or architecture, or values that do not fit together (hidden % heads, ...).
  static ModelConfig from_json_file(const std::string& config_json_path);
  static ModelConfig from_json_text(const std::string& text, const std::string& name);

  // Fills what a hand-built config may leave at 0 (num_kv_heads, head_dim, rotary_dim,
  // intermediate_size, family from model_type, sliding_layers) and checks that the numbers fit together;
  // throws quartet::Error naming `name`. from_json_* and the Transformer call it.
  void complete(const std::string& name = "model config");
  // config.json text as Hugging Face writes it for this family, with "architectures":
  // [architecture] and the dtype ("float32", "bfloat16", ...).
  std::string to_json(const std::string& architecture, const std::string& dtype) const;
  // The most positions a sequence may have: n_positions for learned absolute positions (gpt2),
  // unbounded for rotary models (HF also runs them past max_position_embeddings).
  int64_t position_limit() const;

 private:
  void check_sizes(const std::string& name) const;      // each dimension and the parameter count
  void check_token_ids(const std::string& name) const;  // bos/eos/pad inside the vocabulary
};

// Limits no real model comes near; past them sizes overflow before anything could say why.
constexpr int64_t kMaxModelDim = int64_t(1) << 31;           // one dimension (exclusive)
constexpr int64_t kMaxModelLayers = 1024;
constexpr int64_t kMaxHeadDim = 65536;
constexpr long double kMaxModelParameters = 17592186044416.0L;  // 2^44 parameters

}  // namespace quartet
