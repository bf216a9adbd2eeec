#include "quartet/engine/sampling_setup.hpp"

#include <algorithm>

#include "quartet/model/generation_config.hpp"
#include "quartet/model/rollout_config.hpp"

namespace quartet {

int64_t pad_id_of(const Tokenizer& tokenizer) { return tokenizer.pad_id.value_or(tokenizer.eos_id.value_or(0)); }

SamplingSetup sampling_setup(const Config& config, const Tokenizer& tokenizer, const ModelSpec& model) {
  SamplingSetup s;
  s.pad_id = pad_id_of(tokenizer);
  s.vocab_limit = tokenizer.vocab_size();
  auto stop_at = [&](int64_t id) {
    if (id >= 0 && id < s.vocab_limit && std::find(s.stop_ids.begin(), s.stop_ids.end(), id) == s.stop_ids.end())
      s.stop_ids.push_back(id);
  };
  if (tokenizer.eos_id) stop_at(*tokenizer.eos_id);
  for (int64_t id : model.config.eos_token_ids) stop_at(id);
  for (int64_t id : generation_stop_ids(model.dir)) stop_at(id);
  for (const std::string& text : config.get<RolloutConfig>().stop) {
    const std::optional<int64_t> id = tokenizer.token_to_id(text);
    if (!id) config.deck.fail("rollout.stop", "names '" + text + "', which is not a token of the tokenizer");
    stop_at(*id);
  }
  return s;
}

SamplingParams rollout_sampling(const Config& config, const SamplingSetup& setup) {
  SamplingParams p = sampling_params(config.get<RolloutConfig>());
  p.stop_ids = setup.stop_ids;
  p.pad_id = setup.pad_id;
  p.vocab_limit = setup.vocab_limit;
  return p;
}

}  // namespace quartet
