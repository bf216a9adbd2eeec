#include "quartet/rl/rewards/reward_samples.hpp"

#include "quartet/core/check.hpp"

namespace quartet {

std::vector<RewardSample> reward_samples(const Iteration& it, const std::string& prompt_field) {
  return reward_samples(RewardRows{it.prompts, it.completions, it.answers, it.records, it.rows}, prompt_field);
}

std::vector<RewardSample> reward_samples(const RewardRows& it, const std::string& prompt_field) {
  const std::size_t n = it.completions.size();
  QUARTET_CHECK(it.prompts.size() == n && it.rows.size() == n && it.records.size() == n && it.answers.size() == n,
                "reward_samples: " + std::to_string(n) + " completions but " + std::to_string(it.prompts.size()) +
                    " prompts, " + std::to_string(it.rows.size()) + " rows, " + std::to_string(it.records.size()) +
                    " records and " + std::to_string(it.answers.size()) + " answers");
  std::vector<RewardSample> samples(n);
  for (std::size_t r = 0; r < n; ++r) {
    RewardSample& s = samples[r];
    s.prompt = it.prompts[r];
    s.completion = it.completions[r];
    s.row = it.rows[r];
    // A file without JSON rows (HDF5) still has its answer column; a JSON row's answer, with
    // its own type, takes its place below.
    if (!it.answers[r].empty()) s.answer = it.answers[r];
    if (it.records[r].empty()) continue;
    // The dataset wrote the record from parsed JSON: it parses.
    nlohmann::json record = nlohmann::json::parse(it.records[r]);
    if (!record.is_object()) continue;
    if (record.contains("answer")) s.answer = record["answer"];
    // The prompt's text is s.prompt already: under the deck's field, or "prompt" in a prepared file.
    record.erase(prompt_field);
    record.erase("prompt");
    record.erase("answer");
    if (!record.empty()) s.metadata = std::move(record);
  }
  return samples;
}

}  // namespace quartet
