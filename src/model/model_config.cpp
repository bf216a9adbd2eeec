#include "quartet/model/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

const char* kSupportedTypes = "llama, mistral, qwen2, qwen3, gpt2, gptj, gpt_neox";

// A config.json and its name, so that every refusal names the file and the key.
struct Reader {
  const json& j;
  const std::string& name;

  bool present(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    QUARTET_CHECK(false, name + ": " + key + " " + why);
    std::abort();  // unreachable; QUARTET_CHECK(false) throws
  }

  static int64_t as_int(const json& v, const std::string& key, const Reader& r) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      r.bad(key, v.dump() + " is out of range (at most 2^63 - 1)");
    if (v.is_number_integer()) return v.get<int64_t>();
    // Some writers emit integral values as 4096.0.
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    r.bad(key, "must be an integer, got " + v.dump());
  }
  static double as_double(const json& v, const std::string& key, const Reader& r) {
    if (!v.is_number()) r.bad(key, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  static bool as_bool(const json& v, const std::string& key, const Reader& r) {
    if (!v.is_boolean()) r.bad(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  int64_t req_int(const char* key) const {
    if (!present(key)) bad(std::string("key '") + key + "'", "is missing");
    return as_int(j.at(key), key, *this);
  }
  int64_t opt_int(const char* key, int64_t dflt) const {
    return present(key) ? as_int(j.at(key), key, *this) : dflt;
  }
  double opt_double(const char* key, double dflt) const {
    return present(key) ? as_double(j.at(key), key, *this) : dflt;
  }
  bool opt_bool(const char* key, bool dflt) const {
    return present(key) ? as_bool(j.at(key), key, *this) : dflt;
  }
  std::string opt_string(const char* key, const std::string& dflt) const {
    if (!present(key)) return dflt;
    if (!j.at(key).is_string()) bad(key, "must be a string, got " + j.at(key).dump());
    return j.at(key).get<std::string>();
  }
  std::optional<int64_t> opt_token(const char* key) const {
    if (!present(key)) return std::nullopt;
    const json& v = j.at(key);
    if (v.is_array()) {
      if (v.empty()) return std::nullopt;
      return as_int(v.at(0), key, *this);
    }
    return as_int(v, key, *this);
  }
};

// The architectures quartet can load for a model_type, by head (causal LM, token
// classification, sequence classification). HF has no GPTJForTokenClassification; quartet
// writes that name for a GPT-J critic and reads it back.
struct Architectures {
  const char* causal;
  const char* token;
  const char* sequence;
};

bool architectures_of(const std::string& model_type, Architectures& out) {
  if (model_type == "llama") out = {"LlamaForCausalLM", "LlamaForTokenClassification", "LlamaForSequenceClassification"};
  else if (model_type == "mistral") out = {"MistralForCausalLM", "MistralForTokenClassification", "MistralForSequenceClassification"};
  else if (model_type == "qwen2") out = {"Qwen2ForCausalLM", "Qwen2ForTokenClassification", "Qwen2ForSequenceClassification"};
  else if (model_type == "qwen3") out = {"Qwen3ForCausalLM", "Qwen3ForTokenClassification", "Qwen3ForSequenceClassification"};
  else if (model_type == "gpt2") out = {"GPT2LMHeadModel", "GPT2ForTokenClassification", "GPT2ForSequenceClassification"};
  else if (model_type == "gptj") out = {"GPTJForCausalLM", "GPTJForTokenClassification", "GPTJForSequenceClassification"};
  else if (model_type == "gpt_neox") out = {"GPTNeoXForCausalLM", "GPTNeoXForTokenClassification", "GPTNeoXForSequenceClassification"};
  else return false;
  return true;
}

// rope_parameters (transformers >= 5) or rope_scaling (older files), with rope_theta either
// inside it or at the top level, as transformers' standardize_rope_params reads them.
void read_rope(const Reader& r, ModelConfig& c, double default_theta, const char* theta_alias) {
  json rp = json::object();
  if (r.present("rope_parameters")) rp = r.j.at("rope_parameters");
  else if (r.present("rope_scaling")) rp = r.j.at("rope_scaling");
  const std::string key = r.present("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!rp.is_object()) r.bad(key, "must be an object, got " + rp.dump());
  // transformers reads a dict keyed by layer types as one rope per kind of layer (Gemma 3's
  // shape); quartet has one rope for every layer.
  for (const char* lt : {"full_attention", "sliding_attention", "chunked_attention"})
    if (rp.contains(lt))
      r.bad(key + "." + lt, "is a rope per layer type, which is not supported (one rope for every layer)");
  Reader sub{rp, r.name};

  double theta = default_theta;
  if (theta_alias && r.present(theta_alias)) theta = r.opt_double(theta_alias, theta);
  theta = r.opt_double("rope_theta", theta);
  c.rope_theta = sub.opt_double("rope_theta", theta);

  std::string type = sub.opt_string("rope_type", sub.opt_string("type", "default"));
  const std::string type_key = key + (sub.present("rope_type") || !sub.present("type") ? ".rope_type" : ".type");
  RopeScaling s;
  if (type == "default") {
    s.type = "none";
  } else if (type == "linear" || type == "dynamic" || type == "llama3") {
    s.type = type;
    if (!sub.present("factor")) r.bad(key + ".factor", "is missing (rope type '" + type + "')");
    s.factor = sub.opt_double("factor", 1.0);
    if (type == "llama3") {
      for (const char* k : {"low_freq_factor", "high_freq_factor"})
        if (!sub.present(k)) r.bad(key + "." + k, "is missing (rope type 'llama3')");
      s.low_freq_factor = sub.opt_double("low_freq_factor", 1.0);
      s.high_freq_factor = sub.opt_double("high_freq_factor", 4.0);
      // A top-level original_max_position_embeddings wins over the rope's own, as in
      // transformers' standardize_rope_params; absent from both, max_position_embeddings.
      s.original_max_positions = r.present("original_max_position_embeddings")
                                     ? r.opt_int("original_max_position_embeddings", 0)
                                     : sub.opt_int("original_max_position_embeddings", c.max_positions);
    } else {
      s.original_max_positions = c.max_positions;
    }
  } else {
    r.bad(type_key, "'" + type + "' is not supported (default, linear, dynamic, llama3)");
  }
  c.rope_scaling = s;

  // Llama-shaped models rotate whole heads; only NeoX reads a partial factor (rotary_pct).
  if (c.family == Family::gpt_neox) {
    double pct = sub.opt_double("partial_rotary_factor",
                                r.opt_double("rotary_pct", r.opt_double("partial_rotary_factor", 0.25)));
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * pct);
  } else {
    double pct = sub.opt_double("partial_rotary_factor", r.opt_double("partial_rotary_factor", 1.0));
    if (pct != 1.0) r.bad("partial_rotary_factor", "must be 1 for " + c.model_type + " models");
    c.rotary_dim = c.head_dim;
  }
}

// The sizes that Llama-shaped and GPT-NeoX configs spell alike.
void read_common_dims(const Reader& r, ModelConfig& c) {
  c.vocab_size = r.req_int("vocab_size");
  c.hidden_size = r.req_int("hidden_size");
  c.num_layers = r.req_int("num_hidden_layers");
  c.num_heads = r.req_int("num_attention_heads");
  c.intermediate_size = r.req_int("intermediate_size");
}

void check_activation(const Reader& r, const char* key, const std::string& act) {
  for (const char* ok : {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"})
    if (act == ok) return;
  r.bad(key, "'" + act + "' is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

// A configured window must be a positive number of slots; null means none.
int64_t read_window(const Reader& r, int64_t absent_default) {
  if (!r.j.contains("sliding_window")) return absent_default;
  if (r.j.at("sliding_window").is_null()) return 0;
  const int64_t w = r.opt_int("sliding_window", 0);
  if (w <= 0) r.bad("sliding_window", std::to_string(w) + " must be positive (null = no window)");
  return w;
}

// Qwen2Config and Qwen3Config (transformers 5) alike: the window counts only with
// use_sliding_window (default 4096); layer_types names each layer's attention, and without it
// the layers from max_window_layers (default 28) on slide. A sliding layer without a window is
// refused, as transformers does.
void read_qwen_window(const Reader& r, ModelConfig& c) {
  const bool use = r.opt_bool("use_sliding_window", false);
  c.sliding_window = use ? read_window(r, 4096) : 0;
  // One flag per layer, before complete() has checked the count.
  if (c.num_layers < 1 || c.num_layers > kMaxModelLayers)
    r.bad("num_hidden_layers", "must be in 1 .. " + std::to_string(kMaxModelLayers) + ", got " +
                                   std::to_string(c.num_layers));
  c.sliding_layers.assign(static_cast<size_t>(c.num_layers), false);
  if (r.present("layer_types")) {
    const json& lt = r.j.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.num_layers)
      r.bad("layer_types", "must be a list of num_hidden_layers (" + std::to_string(c.num_layers) +
                               ") entries, got " + lt.dump());
    bool any = false;
    for (size_t i = 0; i < lt.size(); ++i) {
      const std::string v = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
      if (v != "full_attention" && v != "sliding_attention")
        r.bad("layer_types[" + std::to_string(i) + "]",
              "'" + v + "' is not supported (full_attention, sliding_attention)");
      c.sliding_layers[i] = v == "sliding_attention";
      any = any || c.sliding_layers[i];
    }
    if (any && c.sliding_window == 0)
      r.bad("layer_types", "names sliding_attention layers, but there is no window (use_sliding_window "
                           "false or sliding_window null)");
  } else if (c.sliding_window > 0) {
    const int64_t first = r.opt_int("max_window_layers", 28);
    for (int64_t i = std::max<int64_t>(first, 0); i < c.num_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = true;
  }
}

}  // namespace

ModelConfig ModelConfig::from_json_file(const std::string& config_json_path) {
  std::ifstream in(config_json_path);
  QUARTET_CHECK(in.good(), config_json_path + ": cannot open the model config");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), config_json_path);
}

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    QUARTET_CHECK(false, name + ": not valid JSON: " + e.what());
  }
  QUARTET_CHECK(j.is_object(), name + ": the model config must be a JSON object");
  Reader r{j, name};

  ModelConfig c;
  if (!r.present("model_type")) r.bad("key 'model_type'", "is missing");
  c.model_type = r.opt_string("model_type", "");
  Architectures arch{};
  QUARTET_CHECK(architectures_of(c.model_type, arch),
                name + ": model_type '" + c.model_type + "' is not supported (" + kSupportedTypes + ")");
  if (r.present("architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array()) r.bad("architectures", "must be a list, got " + a.dump());
    for (const json& v : a) {
      std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s != arch.causal && s != arch.token && s != arch.sequence)
        r.bad("architectures", "'" + s + "' is not supported for model_type '" + c.model_type +
                                   "' (" + arch.causal + ", " + arch.token + ", " + arch.sequence + ")");
      if (c.architecture.empty()) c.architecture = s;
    }
  }

  const std::string& t = c.model_type;
  if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3") {
    c.family = Family::llama;
    read_common_dims(r, c);
    // Qwen3Config's defaults where a key is absent: 32 key/value heads, head_dim 128.
    c.num_kv_heads = r.opt_int("num_key_value_heads", t == "qwen3" ? 32 : c.num_heads);
    c.head_dim = r.opt_int("head_dim", t == "qwen3" ? 128 : c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
    c.max_positions = r.opt_int("max_position_embeddings",
                                t == "llama" ? 2048 : t == "mistral" ? 4096 * 32 : 32768);
    c.norm_eps = r.opt_double("rms_norm_eps", 1e-6);
    c.activation = r.opt_string("hidden_act", "silu");
    check_activation(r, "hidden_act", c.activation);
    c.tie_word_embeddings = r.opt_bool("tie_word_embeddings", false);
    if (t == "llama") {
      c.attention_bias = r.opt_bool("attention_bias", false);
      c.mlp_bias = r.opt_bool("mlp_bias", false);
    } else if (t == "qwen3") {
      c.attention_bias = r.opt_bool("attention_bias", false);  // q, k, v and o, as Llama's
    } else {
      c.attention_bias = (t == "qwen2");  // Qwen2: q/k/v biases always, o_proj none; Mistral: none
    }
    // MistralModel slides every layer when sliding_window is set (4096 when the key is absent)
    // and ignores layer_types; complete() marks the layers.
    if (t == "mistral") c.sliding_window = read_window(r, 4096);
    if (t == "qwen2" || t == "qwen3") read_qwen_window(r, c);
    c.bos_token_id = r.opt_token("bos_token_id");
    c.eos_token_id = r.opt_token("eos_token_id");
    read_rope(r, c, 10000.0, nullptr);
  } else if (t == "gpt2" || t == "gptj") {
    c.family = t == "gpt2" ? Family::gpt2 : Family::gptj;
    c.vocab_size = r.req_int("vocab_size");
    c.hidden_size = r.req_int("n_embd");
    c.num_layers = r.req_int("n_layer");
    c.num_heads = r.req_int("n_head");
    c.num_kv_heads = c.num_heads;
    c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
    c.max_positions = r.opt_int("n_positions", t == "gpt2" ? 1024 : 2048);
    c.intermediate_size = r.opt_int("n_inner", 4 * c.hidden_size);
    c.norm_eps = r.opt_double("layer_norm_epsilon", 1e-5);
    c.activation = r.opt_string("activation_function", "gelu_new");
    check_activation(r, "activation_function", c.activation);
    c.tie_word_embeddings = r.opt_bool("tie_word_embeddings", t == "gpt2");
    c.bos_token_id = r.opt_token("bos_token_id");
    c.eos_token_id = r.opt_token("eos_token_id");
    if (t == "gpt2") {
      c.attention_bias = true;
      c.rotary_dim = 0;
      if (!r.opt_bool("scale_attn_weights", true))
        r.bad("scale_attn_weights", "false is not supported (attention is scaled by 1/sqrt(head_dim))");
      if (r.opt_bool("scale_attn_by_inverse_layer_idx", false))
        r.bad("scale_attn_by_inverse_layer_idx", "true is not supported");
      if (r.opt_bool("add_cross_attention", false))
        r.bad("add_cross_attention", "true is not supported (decoder-only models)");
    } else {
      c.attention_bias = false;
      c.parallel_residual = true;
      if (j.contains("rotary_dim") && j.at("rotary_dim").is_null())
        r.bad("rotary_dim", "null (rotary over the whole hidden size) is not supported");
      c.rotary_dim = r.opt_int("rotary_dim", 64);
      c.rope_theta = 10000.0;  // GPT-J's sinusoid table has a fixed base
    }
  } else {  // gpt_neox
    c.family = Family::gpt_neox;
    read_common_dims(r, c);
    c.num_kv_heads = c.num_heads;
    c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
    c.max_positions = r.opt_int("max_position_embeddings", 2048);
    c.norm_eps = r.opt_double("layer_norm_eps", 1e-5);
    c.activation = r.opt_string("hidden_act", "gelu");
    check_activation(r, "hidden_act", c.activation);
    c.tie_word_embeddings = r.opt_bool("tie_word_embeddings", false);
    c.parallel_residual = r.opt_bool("use_parallel_residual", true);
    c.attention_bias = r.opt_bool("attention_bias", true);
    c.bos_token_id = r.opt_token("bos_token_id");
    c.eos_token_id = r.opt_token("eos_token_id");
    read_rope(r, c, 10000.0, "rotary_emb_base");
  }
  c.pad_token_id = r.opt_token("pad_token_id");
  c.initializer_range = r.opt_double("initializer_range", 0.02);
  if (r.present("eos_token_id")) {
    const json& e = j.at("eos_token_id");
    if (e.is_array())
      for (const json& v : e) c.eos_token_ids.push_back(Reader::as_int(v, "eos_token_id", r));
    else
      c.eos_token_ids.push_back(*c.eos_token_id);
  }
  c.complete(name);
  return c;
}

void ModelConfig::check_sizes(const std::string& name) const {
  // Kernels index rows and columns with 32-bit integers, and a tensor's byte size must fit in
  // 64 bits: a size past these is a typo or a damaged file, refused before anything is built.
  const std::pair<const char*, int64_t> dims[] = {
      {"vocab_size", vocab_size},          {"hidden_size", hidden_size},
      {"num_hidden_layers", num_layers},   {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads}, {"head_dim", head_dim},
      {"intermediate_size", intermediate_size}, {"max_position_embeddings", max_positions}};
  for (const auto& [key, value] : dims)
    QUARTET_CHECK(value < kMaxModelDim, name + ": " + key + " " + std::to_string(value) +
                                            " is larger than any model's (at most 2^31 - 1)");
  // Each layer is a module of its own and each head dimension a rotary frequency: counts past
  // these would take minutes and gigabytes to build before the memory plan could refuse them.
  QUARTET_CHECK(num_layers <= kMaxModelLayers, name + ": num_hidden_layers " + std::to_string(num_layers) +
                                                   " is more than any model has (at most " +
                                                   std::to_string(kMaxModelLayers) + ")");
  QUARTET_CHECK(head_dim <= kMaxHeadDim, name + ": head_dim " + std::to_string(head_dim) +
                                             " is larger than any model's (at most " + std::to_string(kMaxHeadDim) + ")");
  // The parameter count, in floating point so that it cannot overflow.
  const long double h = hidden_size, q = num_heads * static_cast<long double>(head_dim ? head_dim : hidden_size / num_heads);
  const long double per_layer = 4 * h * q + 3 * h * intermediate_size;
  const long double params = 2 * h * vocab_size + num_layers * per_layer + h * max_positions;
  QUARTET_CHECK(params <= kMaxModelParameters,
                name + ": the sizes (vocab_size " + std::to_string(vocab_size) + ", hidden_size " +
                    std::to_string(hidden_size) + ", " + std::to_string(num_layers) + " layers, intermediate_size " +
                    std::to_string(intermediate_size) + ") make about " +
                    std::to_string(static_cast<double>(params)) + " parameters, more than any model (2^44)");
}

void ModelConfig::check_token_ids(const std::string& name) const {
  auto in_vocab = [&](const char* key, int64_t id) {
    QUARTET_CHECK(id >= 0 && id < vocab_size, name + ": " + key + " " + std::to_string(id) +
                                                  " is not a token of the vocabulary (0 .. " +
                                                  std::to_string(vocab_size - 1) + ")");
  };
  if (bos_token_id) in_vocab("bos_token_id", *bos_token_id);
  if (eos_token_id) in_vocab("eos_token_id", *eos_token_id);
  if (pad_token_id) in_vocab("pad_token_id", *pad_token_id);
  for (int64_t id : eos_token_ids) in_vocab("eos_token_id", id);
}

int64_t ModelConfig::position_limit() const {
  return family == Family::gpt2 ? max_positions : std::numeric_limits<int64_t>::max();
}

void ModelConfig::complete(const std::string& name) {
  auto need = [&](bool ok, const std::string& what) { QUARTET_CHECK(ok, name + ": " + what); };
  Architectures arch{};
  need(architectures_of(model_type, arch),
       "model_type '" + model_type + "' is not supported (" + kSupportedTypes + ")");
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3")
    family = Family::llama;
  else if (model_type == "gpt2") family = Family::gpt2;
  else if (model_type == "gptj") family = Family::gptj;
  else family = Family::gpt_neox;
  qk_norm = model_type == "qwen3";

  need(vocab_size > 0, "vocab_size must be positive");
  need(hidden_size > 0, "hidden_size must be positive");
  need(num_layers > 0, "num_hidden_layers must be positive");
  need(num_heads > 0, "num_attention_heads must be positive");
  check_sizes(name);
  if (family != Family::llama || head_dim == 0)
    need(hidden_size % num_heads == 0, "hidden_size " + std::to_string(hidden_size) +
                                           " is not a multiple of num_attention_heads " +
                                           std::to_string(num_heads));
  if (head_dim == 0) head_dim = hidden_size / num_heads;
  if (family != Family::llama)
    need(head_dim == hidden_size / num_heads, "head_dim must be hidden_size / num_attention_heads");
  if (num_kv_heads == 0) num_kv_heads = num_heads;
  need(num_kv_heads > 0 && num_heads % num_kv_heads == 0,
       "num_attention_heads " + std::to_string(num_heads) + " is not a multiple of num_key_value_heads " +
           std::to_string(num_kv_heads));
  need(family == Family::llama || num_kv_heads == num_heads,
       "grouped-query attention exists only for llama-shaped models");
  if (intermediate_size == 0) intermediate_size = 4 * hidden_size;
  need(intermediate_size > 0, "intermediate_size must be positive");
  if (max_positions == 0) max_positions = 2048;
  need(max_positions > 0, "max_position_embeddings must be positive");
  need(norm_eps > 0, "the norm epsilon must be positive");
  if (family == Family::gpt2) {
    need(rotary_dim == 0, "gpt2 has learned positions, rotary_dim must be 0");
  } else {
    if (rotary_dim == 0) rotary_dim = head_dim;
    // NeoX takes int(head_dim * rotary_pct), odd or not; transformers then rotates
    // 2 * ceil(dim / 2) dims, and quartet does the same. GPT-J breaks on odd dims, so refuse.
    const bool odd_ok = family == Family::gpt_neox;
    need(rotary_dim > 0 && 2 * ((rotary_dim + 1) / 2) <= head_dim && (odd_ok || rotary_dim % 2 == 0),
         "rotary dimension " + std::to_string(rotary_dim) + " must be " + (odd_ok ? "" : "even and ") +
             "at most head_dim " + std::to_string(head_dim));
    need(rope_theta > 0, "rope_theta must be positive");
  }
  if (family == Family::llama) need(rotary_dim == head_dim, "llama-shaped models rotate whole heads");
  const std::string& rt = rope_scaling.type;
  need(rt == "none" || rt == "linear" || rt == "dynamic" || rt == "llama3",
       "rope type '" + rt + "' is not supported (none, linear, dynamic, llama3)");
  need(rt == "none" || family == Family::llama || family == Family::gpt_neox,
       "rope scaling applies to llama-shaped and gpt_neox models only");
  if (rt != "none") need(rope_scaling.factor > 0, "rope_scaling.factor must be positive");
  if (rt == "llama3") {
    need(rope_scaling.original_max_positions > 0, "rope_scaling.original_max_position_embeddings must be positive");
    need(rope_scaling.high_freq_factor != rope_scaling.low_freq_factor,
         "rope_scaling high_freq_factor must differ from low_freq_factor");
  }
  if (rt == "dynamic" && rope_scaling.original_max_positions == 0) rope_scaling.original_max_positions = max_positions;
  need(sliding_window >= 0, "sliding_window must be positive (0 = no window)");
  need(sliding_window == 0 || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3",
       "sliding-window attention exists only for mistral, qwen2 and qwen3 models");
  if (sliding_layers.empty()) sliding_layers.assign(static_cast<size_t>(num_layers), sliding_window > 0);
  need(static_cast<int64_t>(sliding_layers.size()) == num_layers,
       "sliding_layers has " + std::to_string(sliding_layers.size()) + " entries for " +
           std::to_string(num_layers) + " layers");
  for (bool s : sliding_layers) {
    need(!s || sliding_window > 0, "a layer is marked sliding but sliding_window is 0");
    // MistralModel builds one mask for all layers: every layer slides or none does.
    need(model_type != "mistral" || s == (sliding_window > 0),
         "mistral slides every layer when it has a sliding_window (per-layer windows are qwen2's and qwen3's)");
  }
  if (family == Family::gptj) parallel_residual = true;
  if (family == Family::gpt2) parallel_residual = false;
  check_token_ids(name);
  for (const char* ok : {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"})
    if (activation == ok) return;
  need(false, "activation '" + activation + "' is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

std::string ModelConfig::to_json(const std::string& architecture_name, const std::string& dtype) const {
  nlohmann::ordered_json j;
  j["architectures"] = {architecture_name};
  j["model_type"] = model_type;
  auto tok = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
  json eos = eos_token_ids.size() > 1 ? json(eos_token_ids) : tok(eos_token_id);
  auto rope = [&](nlohmann::ordered_json& out, bool partial) {
    nlohmann::ordered_json rp;
    if (partial) rp["partial_rotary_factor"] = static_cast<double>(rotary_dim) / static_cast<double>(head_dim);
    rp["rope_theta"] = rope_theta;
    rp["rope_type"] = rope_scaling.type == "none" ? std::string("default") : rope_scaling.type;
    if (rope_scaling.type != "none") rp["factor"] = rope_scaling.factor;
    if (rope_scaling.type == "llama3") {
      rp["low_freq_factor"] = rope_scaling.low_freq_factor;
      rp["high_freq_factor"] = rope_scaling.high_freq_factor;
      rp["original_max_position_embeddings"] = rope_scaling.original_max_positions;
    }
    out["rope_parameters"] = rp;
  };
  if (family == Family::llama) {
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["num_hidden_layers"] = num_layers;
    j["num_attention_heads"] = num_heads;
    j["num_key_value_heads"] = num_kv_heads;
    j["head_dim"] = head_dim;
    j["hidden_act"] = activation;
    j["max_position_embeddings"] = max_positions;
    j["rms_norm_eps"] = norm_eps;
    if (model_type == "llama") {
      j["attention_bias"] = attention_bias;
      j["mlp_bias"] = mlp_bias;
    }
    if (model_type == "qwen3") j["attention_bias"] = attention_bias;
    const json window = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    if (model_type == "mistral") j["sliding_window"] = window;
    if (model_type == "qwen2" || model_type == "qwen3") {
      // layer_types is what transformers 5 reads; max_window_layers (the first sliding layer)
      // is what older versions read, right whenever the sliding layers are the last ones.
      int64_t first = num_layers;
      json types = json::array();
      for (size_t i = 0; i < sliding_layers.size(); ++i) {
        if (sliding_layers[i] && first == num_layers) first = static_cast<int64_t>(i);
        types.push_back(sliding_layers[i] ? "sliding_attention" : "full_attention");
      }
      j["use_sliding_window"] = sliding_window > 0;
      j["sliding_window"] = window;
      j["max_window_layers"] = first;
      j["layer_types"] = types;
    }
    rope(j, false);
  } else if (family == Family::gpt2 || family == Family::gptj) {
    j["vocab_size"] = vocab_size;
    j["n_embd"] = hidden_size;
    j["n_layer"] = num_layers;
    j["n_head"] = num_heads;
    j["n_positions"] = max_positions;
    j["n_inner"] = intermediate_size;
    j["activation_function"] = activation;
    j["layer_norm_epsilon"] = norm_eps;
    if (family == Family::gptj) j["rotary_dim"] = rotary_dim;
    if (family == Family::gpt2) {
      j["scale_attn_weights"] = true;
      j["scale_attn_by_inverse_layer_idx"] = false;
    }
    for (const char* k : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) j[k] = 0.0;
  } else {
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["num_hidden_layers"] = num_layers;
    j["num_attention_heads"] = num_heads;
    j["hidden_act"] = activation;
    j["max_position_embeddings"] = max_positions;
    j["layer_norm_eps"] = norm_eps;
    j["use_parallel_residual"] = parallel_residual;
    j["attention_bias"] = attention_bias;
    j["rotary_pct"] = static_cast<double>(rotary_dim) / static_cast<double>(head_dim);
    j["rotary_emb_base"] = rope_theta;
    rope(j, true);
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["initializer_range"] = initializer_range;
  j["bos_token_id"] = tok(bos_token_id);
  j["eos_token_id"] = eos;
  j["pad_token_id"] = tok(pad_token_id);
  j["num_labels"] = 1;
  j["dtype"] = dtype;
  j["torch_dtype"] = dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace quartet
