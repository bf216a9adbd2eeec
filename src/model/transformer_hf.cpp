// Hugging Face naming, loading and saving of a Transformer: architecture names, the state under
// HF's parameter names, config.json + safetensors in and out.
#include <torch/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/model/transformer.hpp"
#include "quartet/model/weight_map.hpp"

namespace quartet {

std::string architecture_name(const ModelConfig& c, Head head) {
  std::string prefix;
  if (c.model_type == "llama") prefix = "Llama";
  else if (c.model_type == "mistral") prefix = "Mistral";
  else if (c.model_type == "qwen2") prefix = "Qwen2";
  else if (c.model_type == "qwen3") prefix = "Qwen3";
  else if (c.model_type == "gpt2") prefix = "GPT2";
  else if (c.model_type == "gptj") prefix = "GPTJ";
  else if (c.model_type == "gpt_neox") prefix = "GPTNeoX";
  QUARTET_CHECK(!prefix.empty(), "model_type '" + c.model_type + "' is not supported");
  switch (head) {
    case Head::causal_lm: return prefix == "GPT2" ? "GPT2LMHeadModel" : prefix + "ForCausalLM";
    case Head::token_value: return prefix + "ForTokenClassification";
    case Head::sequence_reward: return prefix + "ForSequenceClassification";
  }
  return prefix;
}

NamedTensors TransformerImpl::hf_state() const {
  NamedTensors out;
  for (const auto& item : named_parameters(true)) out.emplace_back(item.key(), item.value());
  return out;
}

void TransformerImpl::load_hf(const SafetensorsCheckpoint& checkpoint) { load_hf(checkpoint, true); }

std::vector<std::string> TransformerImpl::load_hf(const SafetensorsCheckpoint& ckpt, bool head_from_checkpoint) {
  std::vector<ParamShape> params;
  for (const auto& item : named_parameters(true)) params.push_back({item.key(), item.value().sizes().vec()});
  const WeightMap map = map_weights(ckpt, params, config_, head_,
                                    head_from_checkpoint ? HeadSource::checkpoint : HeadSource::fresh_if_missing);
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters(true)) {
    auto it = map.source.find(item.key());
    if (it == map.source.end()) continue;
    item.value().copy_(ckpt.get(it->second));
    check_finite_weights(ckpt, it->second, item.value());
  }
  return map.fresh;
}

Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype, torch::Device device) {
  return load_model(dir, head, dtype, device, true);
}

Transformer load_model(const std::string& dir, Head head, torch::ScalarType dtype, torch::Device device,
                       bool head_from_checkpoint) {
  auto config = ModelConfig::from_json_file(dir + "/config.json");
  SafetensorsCheckpoint ckpt(dir);
  Transformer model(config, head, torch::TensorOptions().dtype(dtype).device(device), /*random_init=*/false);
  const std::vector<std::string> fresh = model->load_hf(ckpt, head_from_checkpoint);
  if (!fresh.empty()) {
    // A head the checkpoint lacks gets HF's initialisation.
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_parameters(true)) {
      if (std::find(fresh.begin(), fresh.end(), item.key()) == fresh.end()) continue;
      if (item.key().size() > 5 && item.key().compare(item.key().size() - 5, 5, ".bias") == 0)
        item.value().zero_();
      else
        item.value().normal_(0.0, model->config().initializer_range);
    }
  }
  return model;
}

void save_model(const Transformer& model, const std::string& dir) {
  make_directories(dir);
  auto state = model->hf_state();
  QUARTET_CHECK(!state.empty(), "save_model: the model has no parameters");
  std::string dtype;
  switch (state.front().second.scalar_type()) {
    case torch::kFloat32: dtype = "float32"; break;
    case torch::kBFloat16: dtype = "bfloat16"; break;
    case torch::kFloat16: dtype = "float16"; break;
    case torch::kFloat64: dtype = "float64"; break;
    default: dtype = c10::toString(state.front().second.scalar_type());
  }
  const std::string path = dir + "/config.json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    QUARTET_CHECK(out.good(), tmp + ": cannot write");
    out << model->config().to_json(architecture_name(model->config(), model->head()), dtype);
    out.close();
    QUARTET_CHECK(out.good(), tmp + ": write failed");
  }
  QUARTET_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
                path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  save_safetensors_checkpoint(dir, state);
}

}  // namespace quartet
