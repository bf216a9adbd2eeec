#pragma once
// The token ids every command's generation and scoring treat alike, decided once (train, sft,
// dpo, rm, generate):
//   stop_ids     the tokenizer's EOS, every eos_token_id of the model's config.json and of its
//                generation_config.json (Llama 3 and Qwen ship lists: the end of a chat turn
//                beside the end of a text), and rollout.stop's tokens, each once; ids the
//                tokenizer cannot produce are left out;
//   pad_id       the tokenizer's pad token, else its EOS, else 0;
//   vocab_limit  the tokenizer's size: generation never picks an id it cannot decode.
#include <cstdint>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

struct SamplingSetup {
  std::vector<int64_t> stop_ids;
  int64_t pad_id = 0;
  int64_t vocab_limit = 0;
};

// For `tokenizer` and the model `model` generates with. A rollout.stop string that is not one
// token of the tokenizer is a DeckError naming the key.
SamplingSetup sampling_setup(const Config& config, const Tokenizer& tokenizer, const ModelSpec& model);

// The pad id alone (pairs and demonstrations, which do not generate).
int64_t pad_id_of(const Tokenizer& tokenizer);

// The rollout's sampling (model/generation.hpp sampling_params: temperature, top-k, top-p,
// lengths) with `setup`'s ids.
SamplingParams rollout_sampling(const Config& config, const SamplingSetup& setup);

}  // namespace quartet
