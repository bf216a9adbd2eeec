#include "quartet/model/models_config.hpp"

#include <stdexcept>

#include "quartet/core/files.hpp"
#include "quartet/core/hf_cache.hpp"

namespace quartet {

bool is_random_family(const std::string& family) {
  for (const char* f : {"llama", "mistral", "qwen3", "gpt2", "gptj", "gpt_neox"})
    if (family == f) return true;
  return false;
}

namespace {

using M = ModelSectionConfig;
constexpr const char* kRandom = "random:";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// model.<role>.kind: the reward's may name a text reward too (a rule, the user's program or endpoint),
// every other role's is model.
KeyRow<M> kind_row(bool reward) {
  const std::string expected = std::string("expected model") + (reward ? ", rule:<task> (rule:sort_digits, rule:add), "
                                                                         "command:<command line> or an http(s):// URL" : "");
  return parsed<M, RewardKind>(
      "kind", &M::kind, "model",
      [reward, expected](const std::string& text) {
        const bool text_reward = starts_with(text, "rule:") || starts_with(text, "command:") || starts_with(text, "http:") ||
                                 starts_with(text, "https:");
        if (text != "model" && !(reward && text_reward)) throw std::invalid_argument("is '" + text + "'; " + expected);
        try {
          return parse_reward_kind(text);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("is '" + text + "'" + e.what());
        }
      },
      "reward only: model (the model at path) | rule:<task> (a built-in verifiable reward: rule:sort_digits, rule:add) | command:<command line> (your program, one per actor rank, run by /bin/sh -c; JSON lines on its stdin and stdout: docs/reward-programs.md) | http://HOST[:PORT]/PATH or https://... (an endpoint taking OpenRLHF's remote reward model requests; http:<URL> also works)");
}

// A size of a random model: "must be at least N", 0 included.
Check<int> size_at_least(int min) {
  return [min](const int& v) { return v < min ? "must be at least " + std::to_string(min) : ""; };
}

const Check<std::string> kDtype = [](const std::string& d) {
  return d == "float32" || d == "bfloat16" || d == "float16" ? "" : "is '" + d + "'; expected one of: float32 | bfloat16 | float16";
};

std::vector<KeyRow<M>> role_rows(bool reward) {
  return {
      key("path", &M::path, std::string("Hugging Face model directory (config.json, *.safetensors, tokenizer.json); hf:ORG/NAME[@REVISION] (that model in the local hub cache, model.hub_cache); random:FILE.json (that config, random weights); random:<family> (") + kRandomFamilies + ", sized by the keys below)"),
      kind_row(reward),
      key("dtype", &M::dtype, kDtype, "float32 | bfloat16 | float16: parameters and compute"),
      key("hidden", &M::hidden, size_at_least(1), "random:<family>: hidden size"),
      key("layers", &M::layers, size_at_least(1), "random:<family>: transformer blocks"),
      key("heads", &M::heads, size_at_least(1), "random:<family>: attention heads"),
      key("kv_heads", &M::kv_heads, size_at_least(0), "random:<family>: key/value heads (0 = heads)"),
      key("ffn", &M::ffn, size_at_least(0), "random:<family>: MLP width (0 = the family's default)"),
      key("vocab", &M::vocab, size_at_least(0), "random:<family>: vocabulary (0 = the tokenizer's)"),
      key("max_positions", &M::max_positions, size_at_least(1), "random:<family>: longest sequence"),
      key("head_dim", &M::head_dim, size_at_least(0), "random:llama | mistral | qwen3: width of each attention head (0 = hidden / heads)"),
      key("sliding_window", &M::sliding_window, size_at_least(0), "random:mistral | qwen3: sliding-window attention in every layer, each token seeing itself and the sliding_window - 1 tokens before it (0 = none)"),
      key("checkpointing", &M::checkpointing, "activation checkpointing per block (true | false)"),
      key("reshard_after_forward", &M::reshard_after_forward, "trained roles: free each block's gathered parameters after its forward (true) or keep them until the optimizer step (false: one all-gather per block and step, the whole model gathered)"),
      key("offload_optimizer", &M::offload_optimizer, "master weights and AdamW moments in pinned host memory, step on the CPU"),
      key("offload_params", &M::offload_params, "parameter shards in pinned host memory"),
      key("lr", &M::lr, above(0.0), "AdamW learning rate (> 0)"),
      key("weight_decay", &M::weight_decay, at_least(0.0), "AdamW decoupled weight decay (>= 0; biases and norms excluded)"),
  };
}

// What one role's keys say together: its path (an hf: path resolved in the hub cache, a random:
// family or config, or a directory) and the random family's shape.
void check_role(const Deck& deck, const std::string& role, const std::string& hub_cache, M& m) {
  const std::string sec = "model." + role + ".";
  m.source = m.path;
  if (is_hf_path(m.path)) {
    try {
      m.path = resolve_hf_path(m.path, hub_cache);
    } catch (const Error& e) {
      deck.fail(sec + "path", e.what());
    }
  }
  if (starts_with(m.path, kRandom)) {
    const std::string what = m.path.substr(std::string(kRandom).size());
    if (!is_random_family(what) && !is_regular_file(what))
      deck.fail(sec + "path", "is '" + m.path + "': after random: comes a family (" + kRandomFamilies +
                                  ") or a readable config.json, and '" + what + "' is neither");
  } else if (!m.path.empty() && !is_directory(m.path)) {
    deck.fail(sec + "path", "is '" + m.path + "', which is not a directory");
  }
  // A random family that has no such setting is refused rather than built without it.
  const std::string family = starts_with(m.path, kRandom) ? m.path.substr(std::string(kRandom).size()) : "";
  if (is_random_family(family)) {
    const bool llama_shaped = family == "llama" || family == "mistral" || family == "qwen3";
    if (m.head_dim && !llama_shaped)
      deck.fail(sec + "head_dim", "is " + std::to_string(m.head_dim) + ", but " + m.path +
                                      " has heads of hidden / heads (head_dim is for random:llama | mistral | qwen3)");
    if (m.sliding_window && family != "mistral" && family != "qwen3")
      deck.fail(sec + "sliding_window", "is " + std::to_string(m.sliding_window) + ", but " + m.path +
                                            " has no sliding-window attention (random:mistral | qwen3 have)");
  }
  if (m.head_dim == 0 && m.hidden % m.heads != 0) deck.fail(sec + "heads", "must divide " + sec + "hidden");
  if (m.kv_heads && m.heads % m.kv_heads != 0) deck.fail(sec + "kv_heads", "must divide " + sec + "heads");
}

void check_models(const Deck& deck, ModelsConfig& c) {
  check_role(deck, "actor", c.hub_cache, c.actor);
  check_role(deck, "critic", c.hub_cache, c.critic);
  check_role(deck, "reference", c.hub_cache, c.reference);
  check_role(deck, "reward", c.hub_cache, c.reward);
}

std::vector<KeyRow<ModelsConfig>> rows() {
  std::vector<KeyRow<ModelsConfig>> out = {
      key("hub_cache", &ModelsConfig::hub_cache, "the Hugging Face hub cache in which hf:ORG/NAME[@REVISION] paths are found (\"\" = where huggingface_hub looks: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); nothing is downloaded")};
  const std::pair<const char*, ModelSectionConfig ModelsConfig::*> roles[] = {
      {"actor", &ModelsConfig::actor}, {"critic", &ModelsConfig::critic},
      {"reference", &ModelsConfig::reference}, {"reward", &ModelsConfig::reward}};
  for (const auto& [role, member] : roles)
    for (KeyRow<ModelsConfig>& row : nested(role, member, role_rows(std::string(role) == "reward"))) out.push_back(std::move(row));
  return out;
}

}  // namespace

const Section<ModelsConfig>& models_section() {
  static const Section<ModelsConfig> section("model", "Models (each of actor, critic, reference, reward)", rows(), check_models);
  return section;
}

}  // namespace quartet
