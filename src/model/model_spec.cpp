#include "quartet/model/model_spec.hpp"

#include <torch/types.h>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/core/run_config.hpp"

namespace quartet {

Head head_of(Role role) {
  switch (role) {
    case Role::actor:
    case Role::reference: return Head::causal_lm;
    case Role::critic: return Head::token_value;
    case Role::reward: return Head::sequence_reward;
  }
  return Head::causal_lm;
}

bool is_trained(const Config& config, Role role) {
  if (config.get<RunConfig>().is_stage("rm")) return role == Role::reward;
  return role == Role::actor || role == Role::critic;
}

Role tokenizer_role(const Config& config) { return config.get<RunConfig>().is_stage("rm") ? Role::reward : Role::actor; }

const ModelSectionConfig& model_section(const Config& config, Role role) {
  switch (role) {
    case Role::actor: return config.get<ModelsConfig>().actor;
    case Role::critic: return config.get<ModelsConfig>().critic;
    case Role::reference: return config.get<ModelsConfig>().reference;
    case Role::reward: return config.get<ModelsConfig>().reward;
  }
  return config.get<ModelsConfig>().actor;
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: return c10::toString(dtype);
  }
}

torch::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  QUARTET_CHECK(false, "dtype '" + name + "' is not one of float32 | bfloat16 | float16");
}

const char* const kBuiltinAlphabet =
    " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

std::unique_ptr<Tokenizer> make_builtin_tokenizer() {
  return make_char_tokenizer(kBuiltinAlphabet, {"<pad>", "<bos>", "<eos>"});
}

int64_t builtin_vocab_size() {
  static const int64_t n = make_builtin_tokenizer()->vocab_size();
  return n;
}

namespace {

std::string key(Role role, const char* k) { return std::string("model.") + role_name(role) + "." + k; }

// The section whose path (and sizes) describe the role's model: the reference borrows the
// actor's when its own path is empty.
Role source_role(const Config& config, Role role) {
  if (role == Role::reference && config.get<ModelsConfig>().reference.path.empty()) return Role::actor;
  return role;
}

}  // namespace

bool has_model(const Config& config, Role role) {
  if (role == Role::reward) return config.get<ModelsConfig>().reward.kind.is_model() && !config.get<ModelsConfig>().reward.path.empty();
  return true;
}

ModelSpec resolve_model(const Config& config, Role role) {
  const Deck& deck = config.deck;
  const Role src = source_role(config, role);
  const ModelSectionConfig& m = model_section(config, src);
  const std::string path_key = key(src, "path");
  if (m.path.empty()) {
    if (role == Role::reference)
      deck.fail(key(Role::reference, "path"), "is not set and neither is model.actor.path, which the "
                                              "reference defaults to");
    deck.fail(path_key, std::string("is not set: the ") + role_name(role) +
                            " needs a model (a Hugging Face directory, random:FILE.json or random:<family>)");
  }

  ModelSpec spec;
  spec.role = role;
  spec.head = head_of(role);
  spec.trained = is_trained(config, role);
  // The reference takes the actor's dtype too, unless its own section gives one.
  const bool own_dtype = src == role || deck.given(key(role, "dtype"));
  spec.dtype = dtype_from_name(own_dtype ? model_section(config, role).dtype : m.dtype);

  const std::string random = "random:";
  const std::string where = deck.where(path_key);
  try {
    if (m.path.rfind(random, 0) == 0) {
      spec.random = true;
      const std::string what = m.path.substr(random.size());
      if (is_random_family(what)) {
        const bool llama_shaped = what == "llama" || what == "mistral" || what == "qwen3";
        ModelConfig c;
        c.model_type = what;
        c.head_dim = m.head_dim;              // 0 = hidden / heads
        c.sliding_window = m.sliding_window;  // mistral, qwen3: every layer (config.cpp refuses others)
        c.hidden_size = m.hidden;
        c.num_layers = m.layers;
        c.num_heads = m.heads;
        c.num_kv_heads = m.kv_heads;
        c.max_positions = m.max_positions;
        // Family defaults for the MLP width: SwiGLU (llama) 8/3 * hidden rounded up to a
        // multiple of 64, as Llama sizes do (roughly); GPT-shaped models 4 * hidden.
        if (m.ffn > 0) c.intermediate_size = m.ffn;
        else if (llama_shaped) c.intermediate_size = (8 * m.hidden / 3 + 63) / 64 * 64;
        else c.intermediate_size = 4 * m.hidden;
        if (what == "gpt2") {
          c.activation = "gelu_new";
          c.tie_word_embeddings = true;
        } else if (what == "gptj") {
          c.activation = "gelu_new";
        } else if (what == "gpt_neox") {
          c.activation = "gelu";
          c.parallel_residual = true;
        }
        if (!llama_shaped) c.norm_eps = 1e-5;
        if (m.vocab > 0) {
          c.vocab_size = m.vocab;
        } else {
          auto tok = make_builtin_tokenizer();
          c.vocab_size = tok->vocab_size();
          c.bos_token_id = tok->bos_id;
          c.eos_token_id = tok->eos_id;
          c.pad_token_id = tok->pad_id;
          if (tok->eos_id) c.eos_token_ids = {*tok->eos_id};
        }
        c.complete(where + ": " + path_key + " (" + m.path + ")");
        spec.config = c;
      } else {
        spec.config = ModelConfig::from_json_file(what);
      }
    } else {
      const std::string json = m.path + "/config.json";
      if (!is_regular_file(json))
        deck.fail(path_key, "is '" + m.path + "', which has no config.json (a Hugging Face model directory has one)");
      spec.config = ModelConfig::from_json_file(json);
      spec.dir = m.path;
    }
  } catch (const DeckError&) {
    throw;
  } catch (const Error& e) {
    deck.fail(path_key, "is '" + m.path + "': " + e.what());
  }
  return spec;
}

std::string tokenizer_misfit(const Tokenizer& tokenizer, const ModelConfig& config) {
  if (tokenizer.vocab_size() <= config.vocab_size) return "";
  return "the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " tokens but the model's vocab_size is " +
         std::to_string(config.vocab_size) + ": ids " + std::to_string(config.vocab_size) +
         " and above have no embedding (a tokenizer of another model?)";
}

std::vector<int64_t> unit_parameter_counts(const ModelConfig& config, Head head) {
  Transformer model(config, head, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta),
                    /*random_init=*/false);
  const int64_t L = model->config().num_layers;
  std::vector<int64_t> counts(static_cast<size_t>(L + 1), 0);
  std::vector<std::string> prefixes;
  for (int64_t i = 0; i < L; ++i) prefixes.push_back(model->block_prefix(i));
  for (const auto& item : model->named_parameters(true)) {
    const std::string& name = item.key();
    size_t unit = 0;
    // Block prefixes are "<base>.layers.<i>." or "<base>.h.<i>.": the parse is cheap, but a
    // plain search keeps it independent of the naming scheme.
    for (int64_t i = 0; i < L; ++i)
      if (name.compare(0, prefixes[static_cast<size_t>(i)].size(), prefixes[static_cast<size_t>(i)]) == 0) {
        unit = static_cast<size_t>(i + 1);
        break;
      }
    counts[unit] += item.value().numel();
  }
  return counts;
}

}  // namespace quartet
