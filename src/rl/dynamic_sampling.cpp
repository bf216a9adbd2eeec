#include "quartet/rl/dynamic_sampling.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/core/check.hpp"
#include "quartet/rl/scoring.hpp"

namespace quartet {

torch::Tensor informative_groups(const torch::Tensor& scores, int samples_per_prompt) {
  QUARTET_CHECK(scores.defined() && scores.dim() == 1 && samples_per_prompt >= 1 &&
                    scores.size(0) % samples_per_prompt == 0,
                "informative_groups: " + std::to_string(scores.defined() ? scores.numel() : 0) +
                    " scores are not whole groups of " + std::to_string(samples_per_prompt));
  auto g = scores.to(torch::kCPU, torch::kFloat64).reshape({-1, samples_per_prompt});
  // Exactly equal, as verl's std == 0: a score that differs in its last bit still gives the
  // samples different advantages.
  return g.amax(1).ne(g.amin(1));
}

namespace {

template <class T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<int64_t>& rows) {
  std::vector<T> out;
  if (v.empty()) return out;
  for (int64_t r : rows) out.push_back(v.at(static_cast<size_t>(r)));
  return out;
}

torch::Tensor rows_of(const torch::Tensor& t, const torch::Tensor& rows) {
  return t.defined() ? t.index_select(0, rows.to(t.device())) : t;
}

// The defined tensors of `field` over the parts, [r, A_k] ones padded to `actions` columns
// (actions < 0: concatenated as they are).
torch::Tensor cat_field(const std::vector<Iteration>& parts, torch::Tensor Iteration::*field, int64_t actions) {
  std::vector<torch::Tensor> ts;
  for (const auto& p : parts)
    if ((p.*field).defined()) ts.push_back(p.*field);
  if (ts.empty()) return {};
  QUARTET_CHECK(ts.size() == parts.size(), "concat_iterations: a field is defined in some rounds only");
  if (ts[0].dim() == 2 && actions >= 0) return cat_actions(ts, actions);
  return torch::cat(ts);
}

}  // namespace

Iteration select_iteration_rows(const Iteration& it, const torch::Tensor& rows) {
  auto cpu = rows.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> r(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel());
  Iteration out;
  out.index = it.index;
  out.round = it.round;
  out.prompts = pick(it.prompts, r);
  out.answers = pick(it.answers, r);
  out.completions = pick(it.completions, r);
  out.records = pick(it.records, r);
  out.batch = select_rows(it.batch, cpu);
  out.chunks = {out.batch};
  for (auto field : {&Iteration::old_logp, &Iteration::ref_logp, &Iteration::scores, &Iteration::truncated,
                     &Iteration::overlong_penalty, &Iteration::reward_terms})
    out.*field = rows_of(it.*field, cpu);
  return out;
}

Iteration concat_iterations(const std::vector<Iteration>& parts, int64_t pad_id, int64_t max_width) {
  QUARTET_CHECK(!parts.empty(), "concat_iterations: nothing to concatenate");
  Iteration out;
  out.index = parts.back().index;
  out.round = parts.back().round;
  std::vector<RolloutBatch> batches;
  for (const auto& p : parts) {
    batches.push_back(p.batch);
    for (auto field : {&Iteration::prompts, &Iteration::answers, &Iteration::completions, &Iteration::records})
      (out.*field).insert((out.*field).end(), (p.*field).begin(), (p.*field).end());
  }
  out.batch = concat_rollouts(batches, pad_id, max_width);
  out.chunks = {out.batch};
  const int64_t A = out.batch.actions();
  for (auto field : {&Iteration::old_logp, &Iteration::ref_logp, &Iteration::scores, &Iteration::truncated,
                     &Iteration::overlong_penalty})
    out.*field = cat_field(parts, field, A);
  out.reward_terms = cat_field(parts, &Iteration::reward_terms, /*actions=*/-1);  // [r, T]: no action columns
  return out;
}

DynamicBatch::DynamicBatch(int samples_per_prompt, int wanted, int64_t pad_id, int64_t max_width)
    : samples_(samples_per_prompt), wanted_(wanted), pad_id_(pad_id), max_width_(max_width) {}

bool DynamicBatch::add(Iteration round) {
  auto informative = informative_groups(round.scores, samples_);
  const auto* keep = informative.data_ptr<bool>();
  std::vector<int64_t> kept, dropped;
  for (int64_t g = 0; g < informative.numel(); ++g) {
    if (keep[g] && kept_count_ < wanted_) {
      kept.push_back(g);
      ++kept_count_;
    } else {
      dropped.push_back(g);
      if (!keep[g]) ++dropped_;
    }
  }
  drawn_ += informative.numel();
  score_sum_ += round.scores.to(torch::kFloat64).sum().item<double>();
  kept_.push_back(kept);
  dropped_groups_.push_back(dropped);
  rounds_.push_back(std::move(round));
  return kept_count_ >= wanted_;
}

Iteration DynamicBatch::take() {
  QUARTET_CHECK(!rounds_.empty(), "DynamicBatch::take: no round was added");
  // Short of groups: dropped ones fill the batch, in the order drawn.
  for (size_t r = 0; r < rounds_.size() && kept_count_ < wanted_; ++r) {
    auto& d = dropped_groups_[r];
    while (!d.empty() && kept_count_ < wanted_) {
      kept_[r].push_back(d.front());
      d.erase(d.begin());
      ++kept_count_;
      ++filled_;
    }
  }
  std::vector<Iteration> parts;
  for (size_t r = 0; r < rounds_.size(); ++r) {
    if (kept_[r].empty()) continue;
    std::sort(kept_[r].begin(), kept_[r].end());
    std::vector<int64_t> rows;
    for (int64_t g : kept_[r])
      for (int k = 0; k < samples_; ++k) rows.push_back(g * samples_ + k);
    parts.push_back(select_iteration_rows(rounds_[r], torch::tensor(rows, torch::kLong)));
  }
  Iteration out = concat_iterations(parts, pad_id_, max_width_);
  out.index = rounds_.back().index;
  out.round = rounds_.back().round;
  return out;
}

}  // namespace quartet
