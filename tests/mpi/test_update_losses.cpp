// How the updates (rl/updates.hpp) form their losses. The policy loss of an optimizer step is
// aggregated over the whole step (algorithm.loss_agg_mode, rl/losses.hpp): its micro-batches and
// the actor group's ranks change how it is computed, not what. One step over the same 16
// rollout rows, rows of unequal lengths, gives the same gradient in one micro-batch or several,
// on one rank or split over the world's (each rank with its share of the rows in micro-batches
// of its own), for every aggregation mode. (A mean of the micro-batches' own token means, as
// before, would differ: the micro-batches hold different numbers of tokens.) The critic's loss
// is weighted by algorithm.value_coef.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/rl/updates.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_update_losses {

namespace {

constexpr int64_t kVocab = 64, kRows = 16, kPrompt = 5, kActions = 7;

ModelConfig tiny_llama() {
  ModelConfig m;
  m.model_type = "llama";
  m.vocab_size = kVocab;
  m.hidden_size = 32;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 48;
  m.max_positions = 64;
  m.activation = "silu";
  m.complete("test config");
  return m;
}

// The same 16 rows on every rank: row r has r % 7 + 1 actions (the rest masked).
PolicyTargets all_rows() {
  auto gen = at::detail::createCPUGenerator(21);
  PolicyTargets tg;
  const int64_t T = kPrompt + kActions;
  tg.batch.sequences = torch::randint(1, kVocab, {kRows, T}, gen, torch::kLong);
  tg.batch.attention_mask = torch::ones({kRows, T}, torch::kLong);
  tg.batch.action_mask = torch::ones({kRows, kActions}, torch::kLong);
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t keep = r % kActions + 1;
    tg.batch.attention_mask[r].narrow(0, kPrompt + keep, kActions - keep).fill_(0);
    tg.batch.action_mask[r].narrow(0, keep, kActions - keep).fill_(0);
  }
  tg.old_logp = -torch::rand({kRows, kActions}, gen) * 4 - 1;
  tg.advantages = torch::randn({kRows, kActions}, gen);
  tg.view = SamplingView{kVocab, 1.0};
  return tg;
}

PolicyTargets rows(const PolicyTargets& all, int64_t begin, int64_t count) {
  PolicyTargets tg = all;
  auto index = torch::arange(begin, begin + count);
  tg.batch = select_rows(all.batch, index);
  tg.old_logp = all.old_logp.index_select(0, index);
  tg.advantages = all.advantages.index_select(0, index);
  return tg;
}

// One optimizer step over `tg`'s rows (a minibatch of `minibatch` >= them) in micro-batches of
// `micro` (or packed by `tokens`); returns its statistics: the gradient norm (the whole
// group's) and the reported loss.
UpdateStats one_step(Collectives& group, const PolicyTargets& tg, int64_t minibatch, int micro, const std::string& mode,
                int tokens = 0) {
  const Config c = load_config(Deck("aggregation.deck",
                                    "[algorithm]\nepochs = 1\nclip_eps = 0.2\nloss_agg_mode = " + mode +
                                        "\nloss_agg_norm = 5\n[model.actor]\nlr = 1e-3\n",
                                    {"algorithm.minibatch=" + std::to_string(minibatch),
                                     "train.micro_batch=" + std::to_string(micro), "train.max_grad_norm=0",
                                     "train.micro_batch_tokens=" + std::to_string(tokens)},
                                    deck_schema()));
  RoleModel actor;
  actor.model = std::make_unique<ShardedModel>(tiny_llama(), Head::causal_lm, group, ShardOptions{},
                                               source_random(tiny_llama(), 4, torch::kCPU));
  AdamWOptions ao;
  ao.lr = c.get<ModelsConfig>().actor.lr;
  actor.optimizer = std::make_unique<ShardedAdamW>(*actor.model, ao);
  int64_t step = 0;
  const int64_t steps = (tg.batch.rows() + minibatch - 1) / minibatch;
  const UpdateStats s = update_policy(actor, tg, c, &step, steps, 7);
  EXPECT_EQ(s.steps, steps);
  return s;
}

class StepAggregation : public ::testing::TestWithParam<const char*> {};

TEST_P(StepAggregation, SameStepWhateverTheMicroBatchesAndRanks) {
  const std::string mode = GetParam();
  auto self = make_mpi_collectives("aggregation_self", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  const PolicyTargets all = all_rows();
  const UpdateStats one = one_step(*self, all, kRows, kRows, mode);
  const double whole = one.grad_norm;
  ASSERT_GT(whole, 0.0);
  // The reported loss is the step's too, however the step is cut.
  auto same_loss = [&](const UpdateStats& s) { return std::abs(s.loss - one.loss) <= 1e-5 * std::abs(one.loss); };
  for (int micro : {8, 4, 3}) {
    const UpdateStats s = one_step(*self, all, kRows, micro, mode);
    EXPECT_NEAR(s.grad_norm, whole, 1e-5 * whole) << mode << ", micro-batches of " << micro;
    EXPECT_TRUE(same_loss(s)) << mode << ", micro-batches of " << micro << ": loss " << s.loss << " against " << one.loss;
  }
  // Packed micro-batches (train.micro_batch_tokens; rows of 6 to 12 tokens): the same step, in
  // one pass, in passes of a few rows, and with the budget below a row (each row alone).
  for (int tokens : {1000, 30, 12, 4}) {
    const UpdateStats s = one_step(*self, all, kRows, kRows, mode, tokens);
    EXPECT_NEAR(s.grad_norm, whole, 1e-5 * whole) << mode << ", packed by " << tokens;
    EXPECT_TRUE(same_loss(s)) << mode << ", packed by " << tokens << ": loss " << s.loss << " against " << one.loss;
  }
  // Two optimizer steps of 8 rows, packed: the steps hold different numbers of micro-batches,
  // the fewer padded with empty turns, and the reported loss is still the steps' mean.
  const UpdateStats two = one_step(*self, all, 8, 8, mode);
  for (int tokens : {20, 33}) {
    const UpdateStats s = one_step(*self, all, 8, 8, mode, tokens);
    EXPECT_NEAR(s.grad_norm, two.grad_norm, 1e-5 * two.grad_norm) << mode << ", two steps packed by " << tokens;
    EXPECT_NEAR(s.loss, two.loss, 1e-5 * std::abs(two.loss)) << mode << ", two steps packed by " << tokens;
  }
  // Split over the world's ranks (2 or more: rank r takes its share of the rows, unequal where
  // they do not divide), each in micro-batches of 3.
  const int n = test::world().size();
  if (n < 2) return;
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = make_mpi_collectives("aggregation_world", ranks, test::world().comm(), nullptr);
  const int64_t r = test::world().rank(), base = kRows / n, extra = kRows % n;
  const PolicyTargets mine = rows(all, r * base + std::min<int64_t>(r, extra), base + (r < extra ? 1 : 0));
  EXPECT_NEAR(one_step(*group, mine, base + (extra > 0 ? 1 : 0), 3, mode).grad_norm, whole, 1e-5 * whole)
      << mode << ", over " << n << " ranks";
  // Packed on each rank: the ranks' micro-batch counts differ, and the fewer are padded.
  EXPECT_NEAR(one_step(*group, mine, base + (extra > 0 ? 1 : 0), 3, mode, 20 + 7 * static_cast<int>(r)).grad_norm,
              whole, 1e-5 * whole)
      << mode << ", packed, over " << n << " ranks";
}

// One critic step over all_rows() with random old values and returns, the deck's [algorithm]
// epochs = 1 and minibatch = 16 plus `sets`: its gradient norm and reported value loss.
std::pair<double, double> critic_step(const std::vector<std::string>& sets) {
  auto self = make_mpi_collectives("critic_self", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  const PolicyTargets tg = all_rows();
  auto gen = at::detail::createCPUGenerator(5);
  const auto old_values = torch::randn({kRows, kActions}, gen), returns = torch::randn({kRows, kActions}, gen);
  const Config c = load_config(Deck("value.deck", "[algorithm]\nepochs = 1\nminibatch = 16\n", sets, deck_schema()));
  RoleModel critic;
  critic.model = std::make_unique<ShardedModel>(tiny_llama(), Head::token_value, *self, ShardOptions{},
                                                source_random(tiny_llama(), 6, torch::kCPU));
  AdamWOptions ao;
  ao.max_grad_norm = 0;
  critic.optimizer = std::make_unique<ShardedAdamW>(*critic.model, ao);
  int64_t step = 0;
  const UpdateStats s = update_critic(critic, tg.batch, old_values, returns, c, &step, 1, 3);
  return {s.grad_norm, s.loss};
}

// The critic's update over packed rows (train.micro_batch_tokens, one micro-batch) takes the
// padded one's step: the same loss and gradient norm.
TEST(PackedCritic, TakesThePaddedStep) {
  auto step_of = [](int tokens) {
    return critic_step({"train.micro_batch=16", "train.micro_batch_tokens=" + std::to_string(tokens)});
  };
  const auto padded = step_of(0), packed = step_of(1000);
  ASSERT_GT(padded.first, 0.0);
  EXPECT_NEAR(packed.first, padded.first, 1e-5 * padded.first);
  EXPECT_NEAR(packed.second, padded.second, 1e-5 * std::abs(padded.second));
}

// value_coef multiplies the critic's loss, so its gradient: by 0.5, exactly (a power of two).
TEST(ValueCoef, ScalesTheCriticsGradient) {
  auto norm = [](double coef) { return critic_step({"algorithm.value_coef=" + std::to_string(coef)}); };
  const auto one = norm(1.0), half = norm(0.5);
  ASSERT_GT(one.first, 0.0);
  EXPECT_EQ(half.first, 0.5 * one.first);
  EXPECT_EQ(half.second, one.second);  // the value loss is logged unweighted
}

INSTANTIATE_TEST_SUITE_P(Modes, StepAggregation,
                         ::testing::Values("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace

}  // namespace test_update_losses
