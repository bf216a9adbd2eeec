#include "quartet/rl/evaluator.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/core/check.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/rollout_generator.hpp"

namespace quartet {

namespace {

// The sampling seed of one generation pass of an evaluation. Training's passes take
// run.seed * 1000003 + iteration * 4099 + chunk * 131 + rank; these are mixed through
// splitmix64's finaliser from a different start, so that the two never line up (and each draws
// from a generator of its own anyway).
uint64_t eval_seed(uint64_t run_seed, int done, int part, int pass, int rank) {
  uint64_t x = run_seed * 0x9E3779B97F4A7C15ull + 0x5EED0E7A1ull;
  x ^= (static_cast<uint64_t>(done) << 32) ^ (static_cast<uint64_t>(part) << 28) ^ (static_cast<uint64_t>(pass) << 12) ^
       static_cast<uint64_t>(rank);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A batch of no rows (an actor rank whose share of the prompts is empty still takes part).
RolloutBatch empty_rows(torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  return {torch::zeros({0, 2}, opts), torch::zeros({0, 2}, opts), torch::zeros({0, 1}, opts)};
}

}  // namespace

std::vector<DatasetPrompt> eval_share(const Config& config, const PromptDataset& dataset, int group_rank,
                                      int group_size) {
  const EvalConfig& e = config.get<EvalConfig>();
  if (e.count > dataset.size())
    config.deck.fail("eval.count", "is " + std::to_string(e.count) + ", but " + dataset.path() + " holds " +
                                       std::to_string(dataset.size()) + " prompts");
  const int64_t n = e.count > 0 ? e.count : dataset.size();
  std::vector<DatasetPrompt> share;
  for (int64_t i = group_rank; i < n; i += group_size) share.push_back(dataset.get(i));
  return share;
}

Evaluator::Evaluator(const Config& config, RoleModel* actor, std::vector<DatasetPrompt> prompts,
                     SamplingParams sampling, std::function<std::vector<std::string>(const RolloutBatch&)> decode,
                     EvalRewards rewards, int world_rank, MPI_Comm world)
    : config_(config), actor_(actor), prompts_(std::move(prompts)), sampling_(std::move(sampling)),
      decode_(std::move(decode)), rewards_(std::move(rewards)), world_rank_(world_rank), world_(world),
      rows_per_pass_(static_cast<int64_t>(ChunkLayout(config.get<RolloutConfig>()).prompts_per_chunk) *
                     config.get<AlgorithmConfig>().samples_per_prompt),
      max_width_(max_rollout_width(config.get<RolloutConfig>())) {
  sampling_.max_new_tokens = config.get<EvalConfig>().max_new_tokens;
  sampling_.keep_cache = false;
}

bool Evaluator::due(int done) const {
  const EvalConfig& e = config_.get<EvalConfig>();
  if (!e.enabled()) return false;
  if (done == 0) return e.at_start;
  return (e.every > 0 && done % e.every == 0) || (done == config_.get<RunConfig>().iterations && e.at_end);
}

std::vector<RolloutBatch> Evaluator::generate_rows(int copies, const SamplingParams& sp, int done, int part) {
  std::vector<std::vector<int64_t>> ids;
  for (const DatasetPrompt& p : prompts_)
    for (int c = 0; c < copies; ++c) ids.push_back(p.ids);
  const auto dev = actor_->model->device();
  std::vector<RolloutBatch> pieces;
  int pass = 0;
  for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(rows_per_pass_), ++pass) {
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(rows_per_pass_));
    const std::vector<std::vector<int64_t>> slice(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                                                  ids.begin() + static_cast<std::ptrdiff_t>(end));
    auto [prompt, prompt_mask] = left_pad(slice, sp.pad_id);
    SamplingParams p = sp;
    p.seed = eval_seed(config_.get<RunConfig>().seed, done, part, pass, actor_->group->rank());
    Generation g = quartet::generate(actor_->model->module(), prompt.to(dev), prompt_mask.to(dev), p);
    const int64_t P = prompt.size(1);
    pieces.push_back({g.tokens, g.attention_mask, g.attention_mask.narrow(1, P, g.tokens.size(1) - P).contiguous()});
  }
  return pieces;
}

EvalRows Evaluator::rows_of(const std::vector<RolloutBatch>& greedy, const std::vector<RolloutBatch>& sampled) const {
  EvalRows rows;
  std::vector<RolloutBatch> pieces = greedy;
  pieces.insert(pieces.end(), sampled.begin(), sampled.end());
  rows.batch = pieces.empty() ? empty_rows(actor_->model->device())
                              : concat_rollouts(pieces, sampling_.pad_id, max_width_);
  for (const RolloutBatch& piece : pieces)
    for (std::string& text : decode_(piece)) rows.completions.push_back(std::move(text));
  // Row order: every prompt's greedy completion, then each prompt's samples in turn.
  auto add = [&](const DatasetPrompt& p) {
    rows.prompts.push_back(p.text);
    rows.answers.push_back(p.answer);
    rows.records.push_back(p.record);
    rows.indices.push_back(p.index);
  };
  for (const DatasetPrompt& p : prompts_) add(p);
  if (!sampled.empty())
    for (const DatasetPrompt& p : prompts_)
      for (int c = 0; c < config_.get<EvalConfig>().samples; ++c) add(p);
  return rows;
}

EvalMetrics Evaluator::evaluate(int done) {
  const EvalConfig& e = config_.get<EvalConfig>();
  const double start = monotonic_seconds();
  EvalMetrics m(done, e.samples, e.k);
  EvalRows rows;
  if (actor_) {
    actor_->model->gather_full();
    SamplingParams greedy = sampling_;
    greedy.temperature = 0;
    const std::vector<RolloutBatch> g = generate_rows(1, greedy, done, 0);
    std::vector<RolloutBatch> s;
    if (e.samples > 0) {
      SamplingParams sampled = sampling_;
      sampled.temperature = e.temperature;
      s = generate_rows(e.samples, sampled, done, 1);
    }
    actor_->model->release_full();
    rows = rows_of(g, s);
  }
  const std::vector<double> rewards = rewards_(rows);
  if (actor_) {
    QUARTET_CHECK(rewards.size() == rows.completions.size() && rows.completions.size() == rows.prompts.size(),
                  "eval: the reward gave " + std::to_string(rewards.size()) + " scores for " +
                      std::to_string(rows.completions.size()) + " completions on rank " + std::to_string(world_rank_));
    const auto lengths = rows.batch.action_mask.sum(1).to(torch::kCPU).to(torch::kDouble).contiguous();
    const double* len = lengths.data_ptr<double>();
    const size_t P = prompts_.size(), n = static_cast<size_t>(e.samples);
    for (size_t p = 0; p < P; ++p) {
      const size_t first = P + p * n;
      m.add_prompt(rewards[p], len[p], std::vector<double>(rewards.begin() + first, rewards.begin() + first + n),
                   std::vector<double>(len + first, len + first + n), e.pass_threshold);
    }
  }
  m.seconds = monotonic_seconds() - start;
  m.reduce(world_);
  return m;
}

}  // namespace quartet
