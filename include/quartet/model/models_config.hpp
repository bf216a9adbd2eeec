#pragma once
// The deck's [model.actor], [model.critic], [model.reference] and [model.reward] sections, one
// set of keys for each role, and model.hub_cache: where each model comes from, its dtype, the
// sizes of a random one, its sharding and its optimizer. (model.reward's keys for a reward in
// the user's own code are rl/rewards/reward_call_config.hpp's.)
#include <string>

#include "quartet/core/reward_kind.hpp"
#include "quartet/core/settings.hpp"

namespace quartet {

// The families a random:<family> path may name, as the deck and --help spell them.
constexpr const char* kRandomFamilies = "llama | mistral | qwen3 | gpt2 | gptj | gpt_neox";
bool is_random_family(const std::string& family);

struct ModelSectionConfig {  // [model.<role>]
  // A Hugging Face model directory; or random:FILE.json (that config.json, random weights); or
  // random:<family> (kRandomFamilies, random weights, sized by the keys below).
  // "" = not set. An hf:ORG/NAME[@REVISION] path is resolved when the deck is loaded, to the
  // snapshot directory in the local hub cache (core/hf_cache.hpp); `source` keeps what the deck said.
  std::string path;
  std::string source;
  // reward only: the reward model at path (model), a built-in rule (rule:<task>, which needs no
  // model and no ranks), or the user's code, scored on the actor ranks (command:..., http(s)://...).
  RewardKind kind;
  std::string dtype = "float32";  // float32 | bfloat16 | float16: parameters and compute
  // Sizes of a random:<family> model (ignored otherwise).
  int hidden = 64, layers = 2, heads = 4, kv_heads = 0 /* 0 = heads */, ffn = 0 /* 0 = family default */;
  int vocab = 0 /* 0 = the tokenizer's (built-in demo: its character vocabulary) */, max_positions = 256;
  int head_dim = 0;        // llama-shaped families: 0 = hidden / heads
  int sliding_window = 0;  // random:mistral, random:qwen3: every layer's attention window (0 = none)
  bool checkpointing = false;     // activation checkpointing per block (recompute in backward)
  // false: gathered blocks stay through the backward and the step's later micro-batches (one
  // all-gather of each per optimizer step, the whole model's parameters in memory meanwhile)
  bool reshard_after_forward = true;
  bool offload_optimizer = false; // fp32 master weights and AdamW moments in pinned host memory, step on the CPU
  bool offload_params = false;    // the compute-dtype parameter shards in pinned host memory
  double lr = 1e-6;               // AdamW learning rate (trained roles: actor, critic)
  double weight_decay = 0.0;      // AdamW decoupled weight decay (not applied to biases and norms)
};

struct ModelsConfig {  // [model.actor], [model.critic], [model.reference], [model.reward]
  ModelSectionConfig actor, critic, reference, reward;
  std::string hub_cache;  // model.hub_cache: where hf: paths are found ("" = huggingface_hub's default)
};

const Section<ModelsConfig>& models_section();

}  // namespace quartet
