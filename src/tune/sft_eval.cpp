#include "quartet/tune/sft_eval.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cstdio>

#include "quartet/dist/watched_mpi.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/sft_batches.hpp"
#include "quartet/tune/sft_config.hpp"

namespace quartet {

std::vector<int64_t> expected_completion(const SftExample& e, const std::vector<int64_t>& stop_ids) {
  std::vector<int64_t> out;
  for (size_t t = static_cast<size_t>(e.prompt_length); t < e.ids.size(); ++t) {
    out.push_back(e.ids[t]);
    if (std::find(stop_ids.begin(), stop_ids.end(), e.ids[t]) != stop_ids.end()) break;
  }
  return out;
}

SftEvaluator::SftEvaluator(const Config& config, std::vector<const SftExample*> share, SamplingParams sampling,
                           std::function<std::string(const std::vector<int64_t>&)> decode, MPI_Comm world)
    : config_(config), share_(std::move(share)), sampling_(std::move(sampling)), decode_(std::move(decode)),
      world_(world) {
  sampling_.temperature = 0;
  sampling_.keep_cache = false;
}

std::array<double, 3> SftEvaluator::teacher_forced(RoleModel& actor) {
  torch::NoGradGuard no_grad;
  ShardedModel& model = *actor.model;
  const SftConfig& s = config_.get<SftConfig>();
  const std::vector<SftMicroBatch> mbs = bucket_examples(share_, config_.get<TrainConfig>().micro_batch, s.micro_batch_tokens,
                                                         sampling_.pad_id, model.device());
  const int64_t mine = static_cast<int64_t>(mbs.size()), calls = group_max(model.group(), mine);
  torch::Tensor nll = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(model.device()));
  torch::Tensor correct = nll.clone();
  double targets = 0;
  for (int64_t k = 0; k < calls; ++k) {
    if (k >= mine) {  // an empty turn, so that the group's collectives line up
      auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
      (void)model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts));
      continue;
    }
    const SftLoss l = sft_loss(model, mbs[static_cast<size_t>(k)]);
    nll = nll + l.nll_sum.to(torch::kFloat64);
    correct = correct + l.correct.to(torch::kFloat64);
    targets += static_cast<double>(mbs[static_cast<size_t>(k)].target_tokens);
  }
  return {nll.item<double>(), correct.item<double>(), targets};
}

double SftEvaluator::exact_matches(RoleModel& actor, std::string* first_completion) {
  const auto dev = actor.model->device();
  const size_t pass_rows = static_cast<size_t>(config_.get<SftConfig>().stage.batch);
  double matches = 0;
  for (size_t begin = 0; begin < share_.size(); begin += pass_rows) {
    const size_t end = std::min(share_.size(), begin + pass_rows);
    std::vector<std::vector<int64_t>> prompts, wanted;
    int64_t longest = 1;
    for (size_t i = begin; i < end; ++i) {
      const SftExample& e = *share_[i];
      prompts.emplace_back(e.ids.begin(), e.ids.begin() + e.prompt_length);
      wanted.push_back(expected_completion(e, sampling_.stop_ids));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(wanted.back().size()));
    }
    auto [ids, mask] = left_pad(prompts, sampling_.pad_id);
    SamplingParams p = sampling_;
    p.max_new_tokens = longest;
    const Generation g = generate(actor.model->module(), ids.to(dev), mask.to(dev), p);
    const int64_t P = ids.size(1);
    const auto tokens = g.tokens.to(torch::kCPU).contiguous();
    const auto lengths = g.new_lengths.to(torch::kCPU).to(torch::kLong).contiguous();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i), n = lengths[r].item<int64_t>();
      const int64_t* row = tokens[r].data_ptr<int64_t>() + P;
      const std::vector<int64_t> got(row, row + n);
      const std::vector<int64_t>& want = wanted[i];
      const bool stops = !want.empty() && std::find(sampling_.stop_ids.begin(), sampling_.stop_ids.end(),
                                                    want.back()) != sampling_.stop_ids.end();
      const bool same = stops ? got == want
                              : got.size() >= want.size() && std::equal(want.begin(), want.end(), got.begin());
      matches += same ? 1.0 : 0.0;
      if (begin == 0 && i == 0 && first_completion) *first_completion = decode_(got);
    }
  }
  return matches;
}

StageEval SftEvaluator::evaluate(RoleModel* actor, int64_t done) {
  const bool exact = config_.get<SftConfig>().exact_match;
  // nll, correct, targets, exact matches, rows
  std::vector<double> sums(5, 0.0);
  std::string completion;
  if (actor) {
    const auto tf = teacher_forced(*actor);
    std::copy(tf.begin(), tf.end(), sums.begin());
    if (exact) {
      actor->model->gather_full();
      sums[3] = exact_matches(*actor, &completion);
      actor->model->release_full();
    }
    sums[4] = static_cast<double>(share_.size());
  }
  watched::allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, world_,
                     "the held-out sums");
  StageEval e;
  e.metrics["loss"] = sums[0] / std::max(1.0, sums[2]);
  e.metrics["token_accuracy"] = sums[1] / std::max(1.0, sums[2]);
  e.metrics["targets"] = sums[2];
  e.metrics["rows"] = sums[4];
  if (exact) e.metrics["exact_match"] = sums[3] / std::max(1.0, sums[4]);
  char buf[512];
  std::snprintf(buf, sizeof buf, "eval step %lld | heldout loss %.4f | token_accuracy %.3f", static_cast<long long>(done),
                e.metrics["loss"], e.metrics["token_accuracy"]);
  e.log_line = buf;
  if (exact) {
    std::snprintf(buf, sizeof buf, " | exact_match %.3f (%lld of %lld)", e.metrics["exact_match"],
                  static_cast<long long>(sums[3]), static_cast<long long>(sums[4]));
    e.log_line += buf;
    // The world's first row (rank 0's first), as it came out: what the numbers are about.
    if (actor && !share_.empty())
      e.log_line += "\n  sample: " + share_.front()->prompt + " -> \"" + completion + "\" (response \"" +
                    share_.front()->response + "\")";
  }
  return e;
}

}  // namespace quartet
