#pragma once
// Where a model's parameters are in a Hugging Face checkpoint: one set of rules for every command
// that loads weights (generate through Transformer::load_hf, train through the sharded engine's
// source_from_checkpoint), checked in full before any tensor is read.
//   - a parameter is found under its own name, NeoX's embed_out also as lm_head, base weights
//     also without the base model's prefix ("model.", "transformer.", "gpt_neox.");
//   - with the model's shape and a floating-point dtype (F32, F16, BF16, F64): an integer or
//     boolean tensor cannot be a weight, and 8-bit floats are quantized weights that need
//     scales this loader does not apply;
//   - every tensor of the checkpoint is one of the model's, a buffer HF saves beside them
//     (rotary inv_freq, attention masks), or the LM head of tied embeddings;
//   - the head: HeadSource::checkpoint requires it (the actor, the reference, a reward model);
//     HeadSource::fresh_if_missing reads it when the checkpoint has it whole and otherwise
//     leaves it to start fresh, not using the checkpoint's other head (a critic started from a
//     causal LM: its value head is new, its lm_head unused). The caller says so.
// All faults come in one quartet::Error naming the directory and the tensors.
#include <map>
#include <string>
#include <vector>

#include "quartet/model/model_config.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/transformer.hpp"

namespace quartet {

enum class HeadSource { checkpoint, fresh_if_missing };

struct WeightMap {
  std::map<std::string, std::string> source;  // model parameter -> checkpoint tensor
  std::vector<std::string> fresh;             // head parameters the checkpoint lacks
  std::vector<std::string> unused;            // checkpoint tensors of another head, not read
  // "starts its value head (score.weight, score.bias) fresh; lm_head.weight is not used"; "" when
  // the checkpoint held everything.
  std::string note() const;
};

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
};

// `params`: the model's parameters under their HF names (Transformer::named_parameters).
WeightMap map_weights(const SafetensorsCheckpoint& checkpoint, const std::vector<ParamShape>& params,
                      const ModelConfig& config, Head head, HeadSource head_source);
// The same for a model of `config` and `head` (its parameters from a shape-only probe).
WeightMap map_weights(const SafetensorsCheckpoint& checkpoint, const ModelConfig& config, Head head,
                      HeadSource head_source);

// "" when `dtype` can hold weights, else why not.
std::string weight_dtype_problem(c10::ScalarType dtype);

}  // namespace quartet
