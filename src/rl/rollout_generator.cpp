#include "quartet/rl/rollout_generator.hpp"

#include <algorithm>
#include <chrono>

#include "quartet/core/run_config.hpp"
#include "quartet/dist/device_memory.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/rl/algorithm_config.hpp"

namespace quartet {

ChunkLayout::ChunkLayout(const RolloutConfig& rollout) : total(rollout.batch) {
  prompts_per_chunk = rollout.micro_batch > 0 ? std::min(rollout.micro_batch, rollout.batch) : rollout.batch;
  chunks = (rollout.batch + prompts_per_chunk - 1) / prompts_per_chunk;
}

int ChunkLayout::prompts_in(int chunk) const { return std::min(prompts_per_chunk, total - chunk * prompts_per_chunk); }

RolloutGenerator::RolloutGenerator(const Config& config, RoleModel& actor, const PromptDataset& dataset,
                                   PromptSampler& sampler, SamplingParams sampling, int rank)
    : config_(config), actor_(actor), dataset_(dataset), sampler_(sampler), sampling_(std::move(sampling)),
      rank_(rank), layout_(config.get<RolloutConfig>()), max_width_(max_rollout_width(config.get<RolloutConfig>())) {
  sampling_.cache_slots = max_width_;  // room for the widest rollout, should the cache be kept
}

void RolloutGenerator::generate(Iteration& it, Scoring& scoring, const SamplingView& view,
                                const ScorePasses& score_passes) {
  std::vector<torch::Tensor> old_parts;
  actor_.model->gather_full();  // the full weights once per iteration
  const bool on_cache = config_.get<RolloutConfig>().reuse_prompt_cache;
  for (int c = 0; c < layout_.chunks; ++c) {
    KVCache cache;
    const size_t first = it.prompts.size();
    RolloutBatch b = generate_chunk(it, c, on_cache ? &cache : nullptr);
    // The scoring groups get the chunk first, so that they score while the actor takes its
    // old log-probs.
    scoring.hand_off(c, b, {{it.prompts.begin() + first, it.prompts.end()}, {it.records.begin() + first, it.records.end()}});
    old_parts.push_back(on_cache ? score_logprobs_on_cache(*actor_.model, b, cache, score_passes, view)
                                 : score_logprobs(*actor_.model, b, score_passes, view));
    it.chunks.push_back(b);
  }
  actor_.model->release_full();
  it.batch = concat_rollouts(it.chunks, sampling_.pad_id, max_width_);
  it.old_logp = cat_actions(old_parts, it.batch.actions());
}

RolloutBatch RolloutGenerator::generate_chunk(Iteration& it, int chunk, KVCache* cache) {
  std::vector<std::vector<int64_t>> ids;
  for (int64_t index : sampler_.next(layout_.prompts_in(chunk))) {
    DatasetPrompt p = dataset_.get(index);
    for (int k = 0; k < config_.get<AlgorithmConfig>().samples_per_prompt; ++k) {
      ids.push_back(p.ids);
      it.prompts.push_back(p.text);
      it.answers.push_back(p.answer);
      it.rows.push_back(p.index);
      it.records.push_back(p.record);
    }
  }
  auto [prompt, prompt_mask] = left_pad(ids, sampling_.pad_id);
  const auto dev = actor_.model->device();
  SamplingParams sp = sampling_;
  sp.seed = config_.get<RunConfig>().seed * 1000003u + static_cast<uint64_t>(it.index) * 4099u + static_cast<uint64_t>(chunk) * 131u +
            static_cast<uint64_t>(rank_) + static_cast<uint64_t>(it.round) * 7919u;
  sp.keep_cache = cache != nullptr;
  sp.prompt_group = config_.get<AlgorithmConfig>().samples_per_prompt;  // each prompt's rows side by side, above
  const auto start = std::chrono::steady_clock::now();
  Generation g = quartet::generate(actor_.model->module(), prompt.to(dev), prompt_mask.to(dev), sp);
  synchronize_device(dev);  // once a chunk: decode_seconds counts the device's work, not the host's queueing
  decode_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  decode_steps_ += g.stats.steps + 1;  // the prompt's pass gave the first token
  const int64_t P = prompt.size(1);
  if (cache) *cache = std::move(g.cache);
  RolloutBatch b{g.tokens, g.attention_mask, g.attention_mask.narrow(1, P, g.tokens.size(1) - P).contiguous()};
  return pad_actions(b, bucketed_actions(P, b.actions(), max_width_), sampling_.pad_id);
}

}  // namespace quartet
