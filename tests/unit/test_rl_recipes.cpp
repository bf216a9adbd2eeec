// The policy-loss and advantage options of today's recipes on small hand-made tensors: loss
// aggregation (token-mean, seq-mean-token-mean, Dr. GRPO's seq-mean-token-sum-norm), DAPO's
// clip-higher, dual-clip PPO, GSPO's sequence ratio, Dr. GRPO's advantages, REINFORCE++ with and
// without whitening and its baseline variant, the KL loss's estimators, overlong filtering and
// penalty, dynamic sampling's choice of groups, and the deck keys. Every expected value is worked
// out in the comments, never taken from the implementation.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/dynamic_sampling.hpp"
#include "quartet/rl/losses.hpp"
#include "quartet/rl/overlong.hpp"
#include "hand_tensors.hpp"
#include "test_main.hpp"

using namespace quartet;
using namespace quartet::test;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rl_recipes {

namespace {

// Log-probs whose ratios against old log-probs of -1 are `ratios` (kNaN: a masked slot).
torch::Tensor logp_of(const std::vector<double>& ratios) {
  Rows lp(1);
  for (double r : ratios) lp[0].push_back(std::isnan(r) ? kNaN : -1.0 + std::log(r));
  return t2(lp).requires_grad_(true);
}

Config deck(const std::string& text) { return load_config(Deck("t.deck", text, {}, deck_schema())); }

}  // namespace

// ---- loss aggregation ----------------------------------------------------------------------

TEST(AggregateLoss, EachModeByHand) {
  // Row 0: 1 2 3 (fourth masked), row 1: 4, row 2: no token at all.
  auto x = t2({{1, 2, 3, kNaN}, {4, 9, 9, 9}, {5, 5, 5, 5}});
  auto mask = t2({{1, 1, 1, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}}, torch::kLong);
  // token-mean: (1 + 2 + 3 + 4) / 4 = 2.5
  EXPECT_NEAR(scalar(aggregate_loss(x, mask, {LossAgg::token_mean, 1.0, {}})), 2.5, 1e-6);
  // seq-mean-token-mean: rows with a token: (6 / 3 + 4 / 1) / 2 = 3
  EXPECT_NEAR(scalar(aggregate_loss(x, mask, {LossAgg::seq_mean_token_mean, 1.0, {}})), 3.0, 1e-6);
  // seq-mean-token-sum-norm, C = 4: (6 / 4 + 4 / 4) / 2 = 1.25
  EXPECT_NEAR(scalar(aggregate_loss(x, mask, {LossAgg::seq_mean_token_sum_norm, 4.0, {}})), 1.25, 1e-6);
  // A step larger than these rows: its count comes in. token-mean over 20 tokens: 10 / 20;
  // seq-mean-token-mean over 8 sequences: 6 / 8.
  EXPECT_NEAR(scalar(aggregate_loss(x, mask, {LossAgg::token_mean, 1.0, torch::tensor(20.0f)})), 0.5, 1e-6);
  EXPECT_NEAR(scalar(aggregate_loss(x, mask, {LossAgg::seq_mean_token_mean, 1.0, torch::tensor(8.0f)})), 0.75, 1e-6);
  // What a step counts per row: its tokens, or whether it has any.
  EXPECT_TRUE(torch::equal(aggregation_weights(mask, LossAgg::token_mean), t1({3, 1, 0})));
  EXPECT_TRUE(torch::equal(aggregation_weights(mask, LossAgg::seq_mean_token_sum_norm), t1({1, 1, 0})));
  // Nothing at all: 0, not NaN.
  EXPECT_EQ(scalar(aggregate_loss(x, torch::zeros_like(mask), {LossAgg::seq_mean_token_mean, 1.0, {}})), 0.0);
}

TEST(AggregateLoss, LengthWeightsOfTheGradient) {
  // One loss term per token, x = logp; rows of 1 and 3 tokens. d loss / d x per token:
  //   token-mean             1 / 4 everywhere (long rows weigh more in total)
  //   seq-mean-token-mean    row 0: 1 / 2; row 1: 1 / 6 (each row weighs the same)
  //   seq-mean-token-sum-norm (C = 4): 1 / 8 everywhere (Dr. GRPO: no length normalisation)
  auto mask = t2({{1, 0, 0}, {1, 1, 1}});
  const std::pair<LossAgg, Rows> cases[] = {
      {LossAgg::token_mean, {{0.25, 0, 0}, {0.25, 0.25, 0.25}}},
      {LossAgg::seq_mean_token_mean, {{0.5, 0, 0}, {1.0 / 6, 1.0 / 6, 1.0 / 6}}},
      {LossAgg::seq_mean_token_sum_norm, {{0.125, 0, 0}, {0.125, 0.125, 0.125}}}};
  for (const auto& [mode, want] : cases) {
    auto x = torch::zeros({2, 3}).requires_grad_(true);
    aggregate_loss(x, mask, {mode, 4.0, {}}).backward();
    expect_rows(x.grad(), want);
  }
}

// ---- clip-higher, dual clip, GSPO ----------------------------------------------------------

TEST(PolicyLoss, ClipHigherWidensOnlyTheUpperClip) {
  // ratios 1.25 0.75 0.85, advantages 1 -1 -1:
  //   clip [0.8, 1.28] (DAPO): r 1.25, A 1 unclipped -> -1.25; r 0.75, A -1: min(-0.75, -0.8)
  //     = -0.8 clipped -> 0.8; r 0.85 unclipped -> 0.85. Mean 0.4 / 3, clip fraction 1/3.
  //   clip [0.8, 1.2]: r 1.25 clipped -> -1.2: mean 0.45 / 3 = 0.15, clip fraction 2/3.
  auto old = t2({{-1, -1, -1}});
  auto adv = t2({{1, -1, -1}});
  auto mask = t2({{1, 1, 1}});
  auto logp = logp_of({1.25, 0.75, 0.85});
  auto higher = policy_loss(logp, old, adv, mask, {PolicyLossKind::ppo, 0.2, 0.28, 0.0});
  EXPECT_NEAR(scalar(higher.loss), 0.4 / 3, 1e-6);
  EXPECT_NEAR(scalar(higher.clip_fraction), 1.0 / 3, 1e-6);
  higher.loss.backward();
  // Unclipped tokens: -r A / 3: -1.25 / 3, and 0.85 / 3.
  expect_rows(logp.grad(), {{-1.25 / 3, 0, 0.85 / 3}});
  auto symmetric = policy_loss(logp, old, adv, mask, {PolicyLossKind::ppo, 0.2, 0.2, 0.0});
  EXPECT_NEAR(scalar(symmetric.loss), 0.15, 1e-6);
  EXPECT_NEAR(scalar(symmetric.clip_fraction), 2.0 / 3, 1e-6);
  // ppo_policy_loss is the symmetric one.
  EXPECT_NEAR(scalar(ppo_policy_loss(logp, old, adv, mask, 0.2).loss), 0.15, 1e-6);
  EXPECT_EQ(scalar(symmetric.dual_clip_fraction), 0.0);
}

TEST(PolicyLoss, DualClipCapsNegativeAdvantageLoss) {
  // clip 0.2, dual clip c = 3; ratios 5 2 5 0.5, advantages -1 -1 1 -2:
  //   r 5, A -1: -min(-5, -1.2) = 5 -> min(5, 3 * 1) = 3: the dual bound, no gradient
  //   r 2, A -1: -min(-2, -1.2) = 2 < 3: ordinary, gradient -r A / 4 = 0.5
  //   r 5, A  1: -min(5, 1.2) = -1.2 (clipped; A > 0 has no dual clip)
  //   r 0.5, A -2: -min(-1, -1.6) = 1.6 (clipped) < 6
  // mean (3 + 2 - 1.2 + 1.6) / 4 = 1.35; dual fraction 1/4; clip fraction (the clipped term
  // is the min) 2/4.
  auto old = t2({{-1, -1, -1, -1}});
  auto adv = t2({{-1, -1, 1, -2}});
  auto mask = t2({{1, 1, 1, 1}});
  auto logp = logp_of({5, 2, 5, 0.5});
  auto dual = policy_loss(logp, old, adv, mask, {PolicyLossKind::ppo, 0.2, 0.2, 3.0});
  EXPECT_NEAR(scalar(dual.loss), 1.35, 1e-6);
  EXPECT_NEAR(scalar(dual.dual_clip_fraction), 0.25, 1e-6);
  EXPECT_NEAR(scalar(dual.clip_fraction), 0.5, 1e-6);
  dual.loss.backward();
  expect_rows(logp.grad(), {{0, 0.5, 0, 0}});
  // Without it: (5 + 2 - 1.2 + 1.6) / 4 = 1.85, and the first token's gradient is 5 / 4.
  logp.mutable_grad().reset();
  auto plain = policy_loss(logp, old, adv, mask, {PolicyLossKind::ppo, 0.2, 0.2, 0.0});
  EXPECT_NEAR(scalar(plain.loss), 1.85, 1e-6);
  plain.loss.backward();
  expect_rows(logp.grad(), {{1.25, 0.5, 0, 0}});
  const std::string e = test::error_of([&] { policy_loss(logp, old, adv, mask, {PolicyLossKind::ppo, 0.2, 0.2, 0.5}); });
  EXPECT_NE(e.find("clip_ratio_c must be 0 or > 1, got 0.5"), std::string::npos) << e;
}

TEST(PolicyLoss, GspoTakesTheLengthNormalisedSequenceRatio) {
  // Row 0: token log-ratios 0.1 and 0.3, A = 1: s0 = exp(0.2) = 1.2214028 for both tokens.
  // Row 1: log-ratio -0.2 (second token masked), A = -1: s1 = exp(-0.2) = 0.8187308.
  // Clip 0.3: nothing clipped; x = -1.2214028, -1.2214028, 0.8187308; token mean -0.5413583.
  // The gradient per token is that of s_b log pi_bt: -A s_b / 3 = -0.4071343 (row 0) and
  // 0.2729103 (row 1).
  auto logp = t2({{-1.0 + 0.1, -1.0 + 0.3}, {-1.0 - 0.2, kNaN}}).requires_grad_(true);
  auto old = t2({{-1, -1}, {-1, -1}});
  auto adv = t2({{1, 1}, {-1, kNaN}});
  auto mask = t2({{1, 1}, {1, 0}});
  auto wide = policy_loss(logp, old, adv, mask, {PolicyLossKind::gspo, 0.3, 0.3, 0.0});
  EXPECT_NEAR(scalar(wide.loss), -0.5413583, 1e-6);
  EXPECT_EQ(scalar(wide.clip_fraction), 0.0);
  // approx_kl stays per token: ((e^0.1 - 1.1) + (e^0.3 - 1.3) + (e^-0.2 - 0.8)) / 3 = 0.0245868.
  EXPECT_NEAR(scalar(wide.approx_kl), 0.0245868, 1e-6);
  wide.loss.backward();
  expect_rows(logp.grad(), {{-0.4071343, -0.4071343}, {0.2729103, 0}});
  // Clip 0.2: s0 = 1.221 > 1.2 with A > 0 is clipped for both of row 0's tokens (no gradient):
  // (-1.2 - 1.2 + 0.8187308) / 3 = -0.5270897; clip fraction 2/3.
  logp.mutable_grad().reset();
  auto narrow = policy_loss(logp, old, adv, mask, {PolicyLossKind::gspo, 0.2, 0.2, 0.0});
  EXPECT_NEAR(scalar(narrow.loss), (-2.4 + 0.8187308) / 3, 1e-6);
  EXPECT_NEAR(scalar(narrow.clip_fraction), 2.0 / 3, 1e-6);
  narrow.loss.backward();
  expect_rows(logp.grad(), {{0, 0}, {0.2729103, 0}});
}

// ---- advantages ------------------------------------------------------------------------------

TEST(RecipeAdvantages, DrGrpoLeavesOutTheStd) {
  // Groups 1 2 3 4 (mean 2.5) and 0 0 1 1 (mean 0.5): score - mean, nothing divided.
  auto scores = t1({1, 2, 3, 4, 0, 0, 1, 1});
  auto mask = t2({{1, 1}, {1, 0}, {1, 1}, {0, 0}, {1, 1}, {1, 1}, {1, 0}, {1, 1}}, torch::kLong);
  expect_rows(grpo_advantages(scores, mask, 4, 1e-6, /*scale_by_std=*/false),
              {{-1.5, -1.5}, {-0.5, 0}, {0.5, 0.5}, {0, 0}, {-0.5, -0.5}, {-0.5, -0.5}, {0.5, 0}, {0.5, 0.5}});
  // Through the algorithm table with norm_adv_by_std = false.
  AlgorithmConfig al;
  al.algorithm = Algorithm::grpo;
  al.samples_per_prompt = 4;
  al.norm_adv_by_std = false;
  AdvantageInputs in{scores, {}, {}, mask.to(torch::kFloat32), 0.0, nullptr};
  expect_rows(algorithm_spec(Algorithm::grpo).advantages(in, al).advantages,
              {{-1.5, -1.5}, {-0.5, 0}, {0.5, 0.5}, {0, 0}, {-0.5, -0.5}, {-0.5, -0.5}, {0.5, 0}, {0.5, 0.5}});
}

TEST(RecipeAdvantages, ReinforcePlusPlusBaselineCentresThenWhitens) {
  // Groups of 2: scores (1, 0) and (3, 1) -> centred 0.5 -0.5 1 -1; no KL, gamma 1: every action
  // token's return is its row's centred score.
  EXPECT_TRUE(torch::allclose(group_centred(t1({1, 0, 3, 1}), 2), t1({0.5, -0.5, 1, -1})));
  auto scores = t1({1, 0, 3, 1});
  auto mask = t2({{1, 1}, {1, 0}, {1, 1}, {1, 1}});
  AlgorithmConfig al;
  al.algorithm = Algorithm::reinforce_pp_baseline;
  al.samples_per_prompt = 2;
  al.gamma = 1.0;
  al.whiten_advantages = false;
  AdvantageInputs in{scores, {}, {}, mask, 0.0, nullptr};
  const auto& spec = algorithm_spec(Algorithm::reinforce_pp_baseline);
  EXPECT_FALSE(spec.trains_critic);
  EXPECT_EQ(spec.kl, KlUse::reward);
  expect_rows(spec.advantages(in, al).advantages, {{0.5, 0.5}, {-0.5, 0}, {1, 1}, {-1, -1}});
  // Whitened over the 7 action tokens 0.5 0.5 -0.5 1 1 -1 -1: mean 0.5 / 7 = 0.0714286,
  // population variance 4.7142857 / 7 = 0.6734694, std 0.8206518:
  // 0.4285714 / std = 0.5222330, -0.5714286 / std = -0.6963106, 0.9285714 / std = 1.1315048,
  // -1.0714286 / std = -1.3055824.
  al.whiten_advantages = true;
  expect_rows(spec.advantages(in, al).advantages,
              {{0.5222330, 0.5222330}, {-0.6963106, 0}, {1.1315048, 1.1315048}, {-1.3055824, -1.3055824}}, 1e-5);
}

TEST(RecipeAdvantages, ReinforcePlusPlusHonoursWhitenAdvantages) {
  // Scores 2 and -1, no KL, gamma 1: returns 2 2 and -1 (second token masked).
  AlgorithmConfig al;
  al.algorithm = Algorithm::reinforce_pp;
  al.gamma = 1.0;
  al.whiten_advantages = false;
  auto mask = t2({{1, 1}, {1, 0}});
  AdvantageInputs in{t1({2, -1}), {}, {}, mask, 0.0, nullptr};
  expect_rows(algorithm_spec(Algorithm::reinforce_pp).advantages(in, al).advantages, {{2, 2}, {-1, 0}});
  // Whitened: 2 2 -1 has mean 1, population variance 2, so 1 / sqrt(2) and -2 / sqrt(2).
  al.whiten_advantages = true;
  expect_rows(algorithm_spec(Algorithm::reinforce_pp).advantages(in, al).advantages,
              {{0.7071068, 0.7071068}, {-1.4142136, 0}}, 1e-5);
}

TEST(RecipeKlLoss, EachEstimatorAsTheLossTerm) {
  // r = ref - logp = -0.5 and 1. k1 = -r: 0.5 and -1, mean -0.25, d/dlogp = 1 each (halved).
  // k2 = r^2 / 2: 0.125 and 0.5, mean 0.3125, d/dlogp = -r: 0.5 and -1 (halved).
  auto ref = t2({{-1.5, -1.0, -3.0}});
  auto mask = t2({{1, 1, 0}}, torch::kLong);
  auto logp = t2({{-1.0, -2.0, kNaN}}).requires_grad_(true);
  auto k1 = kl_loss(logp, ref, mask, KlEstimator::k1);
  EXPECT_NEAR(scalar(k1), -0.25, 1e-6);
  k1.backward();
  expect_rows(logp.grad(), {{0.5, 0.5, 0}});
  logp.mutable_grad().reset();
  auto k2 = kl_loss(logp, ref, mask, KlEstimator::k2);
  EXPECT_NEAR(scalar(k2), 0.3125, 1e-6);
  k2.backward();
  expect_rows(logp.grad(), {{0.25, -0.5, 0}});
  // Aggregated as the policy loss: seq-mean-token-sum-norm with C = 4 of k2: (0.625 / 4) / 1.
  EXPECT_NEAR(scalar(kl_loss(logp, ref, mask, KlEstimator::k2, {LossAgg::seq_mean_token_sum_norm, 4.0, {}})), 0.15625, 1e-6);
}

// ---- overlong ------------------------------------------------------------------------------

TEST(Overlong, SoftPenaltyRampsOverTheBuffer) {
  // max 10, buffer 4, factor 0.5: nothing up to 6 tokens, then -0.5 * (len - 6) / 4.
  auto p = overlong_penalty(torch::tensor({3, 6, 8, 10}, torch::kLong), 10, 4, 0.5);
  EXPECT_TRUE(torch::allclose(p, t1({0, 0, -0.25, -0.5}))) << p;
  auto e = test::error_of([] { overlong_penalty(torch::tensor({3}, torch::kLong), 10, 10, 1.0); });
  EXPECT_NE(e.find("the buffer must be in 1 .. max_new_tokens - 1 (9), got 10"), std::string::npos) << e;
}

TEST(Overlong, TruncatedRowsRanOutWithoutAStop) {
  // Prompt 2 tokens, 4 actions, max_new_tokens 4, stop ids 9 and 3:
  //   row 0: 4 actions ending in 9 -> finished;  row 1: 4 ending in 5 -> truncated;
  //   row 2: 2 actions -> finished early;       row 3: 4 ending in 3 -> finished.
  RolloutBatch b;
  b.sequences =
      torch::tensor({1, 1, 4, 4, 4, 9, 1, 1, 4, 4, 4, 5, 1, 1, 4, 9, 0, 0, 1, 1, 4, 4, 4, 3}, torch::kLong).reshape({4, 6});
  b.action_mask = torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, torch::kLong).reshape({4, 4});
  b.attention_mask = torch::cat({torch::ones({4, 2}, torch::kLong), b.action_mask}, 1);
  auto t = truncated_rows(b, {9, 3}, 4);
  EXPECT_TRUE(torch::equal(t, torch::tensor({false, true, false, false}))) << t;
  // Without stop ids every full row is truncated.
  EXPECT_TRUE(torch::equal(truncated_rows(b, {}, 4), torch::tensor({true, true, false, true})));
}

// ---- dynamic sampling ------------------------------------------------------------------------

namespace {

// A round of `scores.size()` rows (prompt 1 token, 2 actions), row r's text "p<tag><r>" and
// sequence [r + 10 * tag, r, r].
Iteration round_of(const std::vector<double>& scores, int tag) {
  Iteration it;
  const int64_t B = scores.size();
  std::vector<int64_t> seq;
  for (int64_t r = 0; r < B; ++r) {
    seq.insert(seq.end(), {r + 10 * tag, r, r});
    it.prompts.push_back("p" + std::to_string(tag) + std::to_string(r));
    it.completions.push_back("c");
    it.answers.push_back("");
  }
  it.batch.sequences = torch::tensor(seq).reshape({B, 3});
  it.batch.attention_mask = torch::ones({B, 3}, torch::kLong);
  it.batch.action_mask = torch::ones({B, 2}, torch::kLong);
  it.old_logp = torch::full({B, 2}, -1.0 * tag);
  it.scores = t1(scores);
  return it;
}

}  // namespace

TEST(DynamicSampling, GroupsWhoseScoresAllAgreeAreDropped) {
  auto g = informative_groups(t1({1, 1, 0, 1, 0.5, 0.5}), 2);
  EXPECT_TRUE(torch::equal(g, torch::tensor({false, true, false})));
  // Two groups wanted, of 2 samples: round 0 keeps its group 1 (rows 2, 3), drops group 0;
  // round 1 keeps its group 0 (rows 0, 1) and the batch is full; its group 1 (2, 2) is dropped.
  DynamicBatch d(2, 2, /*pad_id=*/0, /*max_width=*/0);
  EXPECT_FALSE(d.add(round_of({1, 1, 0, 1}, 1)));
  EXPECT_TRUE(d.add(round_of({0, 1, 2, 2}, 2)));
  Iteration it = d.take();
  EXPECT_EQ(it.prompts, (std::vector<std::string>{"p12", "p13", "p20", "p21"}));
  EXPECT_TRUE(torch::equal(it.batch.sequences.select(1, 0), torch::tensor({12, 13, 20, 21}, torch::kLong)));
  EXPECT_TRUE(torch::allclose(it.scores, t1({0, 1, 0, 1})));
  expect_rows(it.old_logp, {{-1, -1}, {-1, -1}, {-2, -2}, {-2, -2}});
  EXPECT_EQ(d.groups_drawn(), 4);
  EXPECT_EQ(d.groups_dropped(), 2);
  EXPECT_EQ(d.groups_filled(), 0);
  EXPECT_EQ(d.drawn_samples(), 8);
  EXPECT_DOUBLE_EQ(d.drawn_score_sum(), 3 + 5);
}

TEST(DynamicSampling, AShortBatchIsFilledWithDroppedGroups) {
  // One round, two groups wanted, one informative: the dropped group 0 fills the batch, and
  // rows keep the order drawn.
  DynamicBatch d(2, 2, 0, 0);
  EXPECT_FALSE(d.add(round_of({1, 1, 0, 1}, 1)));
  Iteration it = d.take();
  EXPECT_EQ(it.prompts, (std::vector<std::string>{"p10", "p11", "p12", "p13"}));
  EXPECT_EQ(d.groups_dropped(), 1);
  EXPECT_EQ(d.groups_filled(), 1);
}

// ---- deck keys -------------------------------------------------------------------------------

TEST(RecipeDeck, KeysResolveAndRefuseByName) {
  // Defaults: today's PPO loss (symmetric clip_eps, no dual clip, token-mean), k1 in the reward
  // and k3 as GRPO's loss term.
  Config c = deck("[algorithm]\nclip_eps = 0.3\n");
  EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().clip_low, 0.3);
  EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().clip_high, 0.3);
  EXPECT_EQ(c.get<AlgorithmConfig>().clip_ratio_c, 0.0);
  EXPECT_EQ(c.get<AlgorithmConfig>().loss_agg_mode, LossAgg::token_mean);
  EXPECT_EQ(c.get<AlgorithmConfig>().policy_loss, PolicyLossKind::ppo);
  EXPECT_EQ(c.get<AlgorithmConfig>().kl_estimator, KlEstimator::k1);
  EXPECT_EQ(c.get<AlgorithmConfig>().kl_loss_estimator, KlEstimator::k3);
  EXPECT_TRUE(c.get<AlgorithmConfig>().norm_adv_by_std);
  // A DAPO-style deck.
  c = deck("[algorithm]\nname = grpo\nsamples_per_prompt = 4\nclip_high = 0.28\nloss_agg_mode = seq-mean-token-sum-norm\n"
           "policy_loss = gspo\nclip_ratio_c = 3\nkl_estimator = k2\ndynamic_sampling = true\n"
           "overlong_buffer = 4\noverlong_penalty_factor = 0.5\noverlong_filter = true\n");
  EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().clip_low, 0.2);
  EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().clip_high, 0.28);
  EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().clip_ratio_c, 3.0);
  EXPECT_EQ(c.get<AlgorithmConfig>().loss_agg_mode, LossAgg::seq_mean_token_sum_norm);
  EXPECT_STREQ(name_of(c.get<AlgorithmConfig>().loss_agg_mode), "seq-mean-token-sum-norm");
  EXPECT_EQ(c.get<AlgorithmConfig>().policy_loss, PolicyLossKind::gspo);
  EXPECT_EQ(c.get<AlgorithmConfig>().kl_estimator, KlEstimator::k2);
  EXPECT_EQ(c.get<AlgorithmConfig>().kl_loss_estimator, KlEstimator::k2);
  EXPECT_TRUE(c.get<AlgorithmConfig>().dynamic_sampling);
  EXPECT_EQ(c.get<AlgorithmConfig>().overlong_buffer, 4);
  EXPECT_TRUE(c.get<AlgorithmConfig>().overlong_filter);
  EXPECT_STREQ(name_of(deck("[algorithm]\nname = reinforce++-baseline\nsamples_per_prompt = 2\n").get<AlgorithmConfig>().algorithm),
               "reinforce++-baseline");
  const std::pair<std::string, std::string> refusals[] = {
      {"clip_ratio_c = 0.5", "t.deck:2: algorithm.clip_ratio_c must be 0 (off) or > 1"},
      {"clip_low = 1.5", "t.deck:2: algorithm.clip_low must be in [0, 1)"},
      {"loss_agg_mode = seq-sum", "algorithm.loss_agg_mode is 'seq-sum'; expected one of: token-mean | "
                                  "seq-mean-token-mean | seq-mean-token-sum-norm"},
      {"policy_loss = cispo", "algorithm.policy_loss is 'cispo'; expected one of: ppo | gspo"},
      {"kl_estimator = k4", "algorithm.kl_estimator is 'k4'; expected one of: auto | k1 | k2 | k3"},
      {"name = reinforce++-baseline", "algorithm.samples_per_prompt must be at least 2 for reinforce++-baseline"},
      {"dynamic_sampling = true", "algorithm.dynamic_sampling needs algorithm.samples_per_prompt >= 2"},
      {"overlong_buffer = -1", "algorithm.overlong_buffer must be >= 0"},
      {"dynamic_sampling_max_rounds = 0", "algorithm.dynamic_sampling_max_rounds must be at least 1"}};
  for (const auto& [line, want] : refusals) {
    const std::string e = test::error_of([&] { deck("[algorithm]\n" + line + "\n"); });
    EXPECT_NE(e.find(want), std::string::npos) << line << ": " << e;
  }
}

}  // namespace test_rl_recipes
