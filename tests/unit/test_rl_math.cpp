// The arithmetic of RL training on small hand-made tensors: KL estimators, token rewards, GAE,
// discounted returns, GRPO and RLOO baselines, whitening, running moments, the KL controller,
// chunked log-probs and entropy, the PPO policy and value losses, GRPO's KL loss and the
// learning-rate schedules. Every expected value is worked out in the comments or by a plain
// scalar loop written here, never taken from the implementation.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/engine/lr_schedule.hpp"
#include "quartet/engine/running_moments.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/losses.hpp"
#include "quartet/shard/train_config.hpp"
#include "hand_tensors.hpp"
#include "test_main.hpp"

using namespace quartet;
using namespace quartet::test;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rl_math {

// ---- KL estimators -------------------------------------------------------------------------

// r = ref_logp - logp: row 0: -1.5 - -1.0 = -0.5, -1.0 - -2.0 = 1.0, 0; row 1: 0.2, then masked
// (a NaN in the masked slot must not leak).
struct KlCase {
  torch::Tensor logp = t2({{-1.0, -2.0, -0.5}, {-0.3, kNaN, 4.0}});
  torch::Tensor ref = t2({{-1.5, -1.0, -0.5}, {-0.1, -7.0, kNaN}});
  torch::Tensor mask = t2({{1, 1, 1}, {1, 0, 0}}, torch::kLong);
};

TEST(KlEstimate, K1IsLogRatioOfActorOverReference) {
  KlCase c;
  expect_rows(kl_estimate(c.logp, c.ref, c.mask, KlEstimator::k1), {{0.5, -1.0, 0.0}, {-0.2, 0, 0}});
}

TEST(KlEstimate, K2IsHalfSquaredLogRatio) {
  KlCase c;
  // 0.25 / 2, 1 / 2, 0; 0.04 / 2
  expect_rows(kl_estimate(c.logp, c.ref, c.mask, KlEstimator::k2), {{0.125, 0.5, 0.0}, {0.02, 0, 0}});
}

TEST(KlEstimate, K3IsExpMinusOneMinusR) {
  KlCase c;
  // exp(-0.5) - 1 + 0.5 = 0.60653066 - 0.5; exp(1) - 2 = 0.71828183; exp(0.2) - 1.2 = 0.02140276
  expect_rows(kl_estimate(c.logp, c.ref, c.mask, KlEstimator::k3),
              {{0.10653066, 0.71828183, 0.0}, {0.02140276, 0, 0}});
}

TEST(KlEstimate, BoolAndFloatMasksAgreeAndEstimatesAreClamped) {
  // r = 20: k3 = exp(20) - 21 ~ 4.85e8 -> 10; r = -15: k1 = 15 -> 10, k3 = exp(-15) + 14 -> 10.
  auto logp = t2({{-20.0, -1.0}});
  auto ref = t2({{0.0, -16.0}});
  auto mask = t2({{1, 1}}, torch::kBool);
  expect_rows(kl_estimate(logp, ref, mask, KlEstimator::k3), {{10.0, 10.0}});
  expect_rows(kl_estimate(logp, ref, mask.to(torch::kFloat32), KlEstimator::k1), {{-10.0, 10.0}});
}

TEST(KlEstimate, NamesAndShapeErrors) {
  // The deck's names, parsed once when the deck is loaded.
  auto with = [](const std::string& value) {
    return load_config(Deck("t.deck", "[algorithm]\nkl_estimator = " + value + "\n", {}, deck_schema()));
  };
  EXPECT_EQ(with("k2").get<AlgorithmConfig>().kl_estimator, KlEstimator::k2);
  EXPECT_STREQ(name_of(KlEstimator::k3), "k3");
  const std::string refused = test::error_of([&] { with("k4"); });
  EXPECT_NE(refused.find("t.deck:2: algorithm.kl_estimator is 'k4'; expected one of: auto | k1 | k2 | k3"), std::string::npos)
      << refused;
  auto e = test::error_of([] { kl_estimate(torch::zeros({2, 3}), torch::zeros({2, 4}), torch::ones({2, 3}), KlEstimator::k1); });
  EXPECT_NE(e.find("kl_estimate: logp [2, 3] and ref_logp [2, 4] must have the same shape"), std::string::npos) << e;
}

// ---- token rewards -------------------------------------------------------------------------

TEST(TokenRewards, KlPenaltyOnEveryTokenAndScoreOnTheLast) {
  auto scores = t1({2.0, -1.0, 5.0, 3.0});
  auto kl = t2({{0.1, 0.2, 9.0, 9.0}, {0.3, -0.1, 0.5, 0.0}, {1, 1, 1, 1}, {0.2, 7.0, 0.4, 7.0}});
  // Row 3 has a hole: its last action token is index 2.
  auto mask = t2({{1, 1, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, 0, 1, 0}}, torch::kLong);
  // -0.5 * kl on action tokens; + score at the last one; the empty row gets nothing.
  expect_rows(token_rewards(scores, kl, mask, 0.5), {{-0.05, -0.1 + 2.0, 0, 0},
                                                     {-0.15, 0.05, -0.25, 0.0 + -1.0},
                                                     {0, 0, 0, 0},
                                                     {-0.1, 0, -0.2 + 3.0, 0}});
  // Without a reference: the scores alone.
  expect_rows(token_rewards(scores, torch::Tensor(), mask, 0.5),
              {{0, 2.0, 0, 0}, {0, 0, 0, -1.0}, {0, 0, 0, 0}, {0, 0, 3.0, 0}});
  auto e = test::error_of([&] { token_rewards(t1({1.0, 2.0}), kl, mask, 0.5); });
  EXPECT_NE(e.find("scores must be [B] = [4]"), std::string::npos) << e;
}

// ---- GAE and discounted returns -----------------------------------------------------------

namespace {
// OpenRLHF's recursion written out with scalars: rewards and values times the mask, then
// backwards over all T positions with V_T = 0.
void scalar_gae(const Rows& r, const Rows& v, const Rows& m, double gamma, double lambda, Rows& adv, Rows& ret) {
  adv = r;
  ret = r;
  for (size_t b = 0; b < r.size(); ++b) {
    const size_t T = r[b].size();
    double last = 0;
    for (size_t i = T; i-- > 0;) {
      const double next_v = i + 1 < T ? v[b][i + 1] * m[b][i + 1] : 0.0;
      const double delta = r[b][i] * m[b][i] + gamma * next_v - v[b][i] * m[b][i];
      last = delta + gamma * lambda * last;
      adv[b][i] = last * m[b][i];
      ret[b][i] = (last + v[b][i]) * m[b][i];
    }
  }
}
}  // namespace

TEST(Gae, MatchesAScalarLoopOnAPaddedBatch) {
  Rows r = {{0.1, -0.2, 0.05, 1.5}, {-0.1, 0.7, 123.0, -55.0}};  // row 1: 2 action tokens
  Rows v = {{0.3, 0.4, -0.2, 0.9}, {0.5, -0.6, 77.0, 88.0}};
  Rows m = {{1, 1, 1, 1}, {1, 1, 0, 0}};
  Rows adv, ret;
  scalar_gae(r, v, m, 0.99, 0.95, adv, ret);
  auto out = gae(t2(r), t2(v), t2(m, torch::kLong), 0.99, 0.95);
  expect_rows(out.advantages, adv, 1e-5);
  expect_rows(out.returns, ret, 1e-5);
}

TEST(Gae, ByHandWithGammaAndLambdaOne) {
  // gamma = lambda = 1: A_t = (sum of rewards from t) - V_t, returns = sum of rewards from t.
  // Rewards 0, 0, 1 and V = 0.5 everywhere: returns 1, 1, 1; advantages 0.5, 0.5, 0.5.
  auto out = gae(t2({{0, 0, 1, kNaN}}), t2({{0.5, 0.5, 0.5, kNaN}}), t2({{1, 1, 1, 0}}), 1.0, 1.0);
  expect_rows(out.advantages, {{0.5, 0.5, 0.5, 0}});
  expect_rows(out.returns, {{1, 1, 1, 0}});
}

TEST(Gae, HolesInTheMaskAreSkipped) {
  // A row with a hole at index 1 gives, on its action tokens, what the compact row gives.
  auto holed = gae(t2({{0.2, 50.0, -0.3, 1.0}}), t2({{0.1, 60.0, 0.4, -0.2}}), t2({{1, 0, 1, 1}}), 0.9, 0.8);
  auto compact = gae(t2({{0.2, -0.3, 1.0}}), t2({{0.1, 0.4, -0.2}}), t2({{1, 1, 1}}), 0.9, 0.8);
  auto a = compact.advantages, g = compact.returns;
  expect_rows(holed.advantages, {{a[0][0].item<double>(), 0, a[0][1].item<double>(), a[0][2].item<double>()}});
  expect_rows(holed.returns, {{g[0][0].item<double>(), 0, g[0][1].item<double>(), g[0][2].item<double>()}});
}

TEST(DiscountedReturns, ByHand) {
  // gamma 0.5: G2 = 3, G1 = 2 + 0.5 * 3 = 3.5, G0 = 1 + 0.5 * 3.5 = 2.75; row 1: G0 = -1.
  expect_rows(discounted_returns(t2({{1, 2, 3, 9}, {-1, kNaN, 5, 5}}), t2({{1, 1, 1, 0}, {1, 0, 0, 0}}), 0.5),
              {{2.75, 3.5, 3.0, 0}, {-1, 0, 0, 0}});
}

// ---- GRPO and RLOO ------------------------------------------------------------------------

TEST(GroupBaselines, GrpoTwoGroupsOfFour) {
  // Group 1 scores 1 2 3 4: mean 2.5, population variance (2.25 + .25 + .25 + 2.25) / 4 = 1.25,
  // std 1.1180340; advantages -1.5 / std = -1.3416408, -0.4472136, 0.4472136, 1.3416408.
  // Group 2 scores 0 0 1 1: mean 0.5, std 0.5; advantages -1 -1 1 1 (eps 1e-6 -> 0.999998).
  auto scores = t1({1, 2, 3, 4, 0, 0, 1, 1});
  auto mask = t2({{1, 1}, {1, 0}, {1, 1}, {0, 0}, {1, 1}, {1, 1}, {1, 0}, {1, 1}}, torch::kLong);
  expect_rows(grpo_advantages(scores, mask, 4),
              {{-1.3416408, -1.3416408}, {-0.4472136, 0}, {0.4472136, 0.4472136}, {0, 0},
               {-1, -1}, {-1, -1}, {1, 0}, {1, 1}},
              1e-5);
  auto e = test::error_of([&] { grpo_advantages(scores, mask, 3); });
  EXPECT_NE(e.find("8 sequences is not a whole number of groups of samples_per_prompt = 3"), std::string::npos) << e;
}

TEST(GroupBaselines, RlooTwoGroupsOfThree) {
  // Group 1 (1, 2, 6): 1 - (2 + 6) / 2 = -3, 2 - (1 + 6) / 2 = -1.5, 6 - (1 + 2) / 2 = 4.5.
  // Group 2 (0, 3, 3): 0 - 3 = -3, 3 - 1.5 = 1.5, 3 - 1.5 = 1.5.
  auto scores = t1({1, 2, 6, 0, 3, 3});
  auto mask = t2({{1, 1}, {1, 1}, {1, 0}, {1, 1}, {0, 0}, {1, 1}});
  expect_rows(rloo_advantages(scores, mask, 3), {{-3, -3}, {-1.5, -1.5}, {4.5, 0}, {-3, -3}, {0, 0}, {1.5, 1.5}});
  EXPECT_NE(test::error_of([&] { rloo_advantages(scores, mask, 1); }).find("samples_per_prompt must be >= 2"),
            std::string::npos);
}

// ---- whitening and masked means -----------------------------------------------------------

TEST(MaskedWhiten, OverTheMaskedElements) {
  // Elements 1 2 3 4: mean 2.5, population variance 1.25; (x - 2.5) / sqrt(1.25 + 1e-8).
  auto x = t2({{1, 2, 3, kNaN}, {4, 100, 100, 100}});
  auto mask = t2({{1, 1, 1, 0}, {1, 0, 0, 0}}, torch::kBool);
  expect_rows(masked_whiten(x, mask), {{-1.3416408, -0.4472136, 0.4472136, 0}, {1.3416408, 0, 0, 0}});
  // shift_mean = false adds the mean back: 1.1583592, 2.0527864, 2.9472136, 3.8416408.
  expect_rows(masked_whiten(x, mask, nullptr, false), {{1.1583592, 2.0527864, 2.9472136, 0}, {3.8416408, 0, 0, 0}});
}

TEST(MaskedMean, OverTheMaskedElementsAndZeroWhenEmpty) {
  auto x = t2({{1, 2, 3, kNaN}, {4, 100, 100, 100}});
  auto mask = t2({{1, 1, 1, 0}, {1, 0, 0, 0}});
  EXPECT_NEAR(scalar(masked_mean(x, mask)), 2.5, 1e-6);
  EXPECT_EQ(scalar(masked_mean(x, torch::zeros({2, 4}))), 0.0);
  auto e = test::error_of([&] { masked_mean(x, torch::ones({2, 3})); });
  EXPECT_NE(e.find("masked_mean: x [2, 4] and mask [2, 3] must have the same shape"), std::string::npos) << e;
}

// ---- running moments ----------------------------------------------------------------------

TEST(RunningMoments, EqualsTheStatisticsOfTheConcatenation) {
  const std::vector<std::vector<double>> batches = {{1, 2, 3}, {4, 5}, {10}, {-2.5, 0.5, 7, 8}};
  RunningMoments m;
  std::vector<double> seen;
  for (const auto& b : batches) {
    m.update(t1(b, torch::kFloat64));
    seen.insert(seen.end(), b.begin(), b.end());
    double sum = 0;
    for (double v : seen) sum += v;
    const double mean = sum / seen.size();
    double ss = 0;
    for (double v : seen) ss += (v - mean) * (v - mean);
    EXPECT_NEAR(m.mean, mean, 1e-12);
    EXPECT_NEAR(m.var, ss / seen.size(), 1e-12);
    EXPECT_EQ(m.count, double(seen.size()));
  }
  // All 10 values: sum 25 + 13 = 38, mean 3.8; squares 1 4 9 16 25 100 6.25 .25 49 64 = 274.5;
  // var = 274.5 / 10 - 3.8^2 = 27.45 - 14.44 = 13.01.
  EXPECT_NEAR(m.mean, 3.8, 1e-12);
  EXPECT_NEAR(m.var, 13.01, 1e-12);
  // normalise(8.8) = (8.8 - 3.8) / sqrt(13.01) = 5 / 3.6069378 = 1.3862174.
  EXPECT_NEAR(scalar(m.normalise(t1({8.8}))[0]), 1.3862174, 1e-6);
  // An empty batch changes nothing.
  m.update(torch::zeros({0}));
  EXPECT_EQ(m.count, 10.0);
}

// ---- KL controller ------------------------------------------------------------------------

TEST(KlController, AdaptiveFollowsZieglerAndFixedStays) {
  KlController c;
  c.adaptive = true;
  c.coef = 0.1;
  c.target = 6.0;
  c.horizon = 10000;
  c.update(9.0, 1000);  // e = clip(9 / 6 - 1 = 0.5) = 0.2; coef *= 1 + 0.2 * 0.1 = 1.02
  EXPECT_NEAR(c.coef, 0.102, 1e-12);
  c.update(5.4, 500);  // e = 0.9 - 1 = -0.1; coef *= 1 - 0.1 * 0.05 = 0.995 -> 0.10149
  EXPECT_NEAR(c.coef, 0.10149, 1e-12);
  c.update(0.0, 10000);  // e = clip(-1) = -0.2; coef *= 0.8 -> 0.081192
  EXPECT_NEAR(c.coef, 0.081192, 1e-12);
  KlController fixed;
  fixed.coef = 0.3;
  fixed.update(100.0, 1000);
  EXPECT_EQ(fixed.coef, 0.3);
}

// ---- log-probs and entropy ----------------------------------------------------------------

namespace {
// The plain versions: one whole float32 log_softmax.
torch::Tensor plain_logprobs(const torch::Tensor& logits, const torch::Tensor& tokens) {
  return torch::log_softmax(logits.to(torch::kFloat32), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
}
torch::Tensor plain_entropy(const torch::Tensor& logits) {
  auto lp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  return -(lp.exp() * lp).sum(-1);
}

// Values and gradients (under a random upstream gradient) of f and g on the same logits.
void compare_with_plain(const torch::Tensor& base, const torch::Tensor& tokens, double tol) {
  auto upstream = torch::randn({base.size(0), base.size(1)});
  auto a = base.detach().clone().requires_grad_(true);
  auto b = base.detach().clone().requires_grad_(true);
  auto lp = token_logprobs(a, tokens);
  auto lp_ref = plain_logprobs(b, tokens);
  EXPECT_EQ(lp.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(lp, lp_ref, tol, tol)) << (lp - lp_ref).abs().max();
  (lp * upstream).sum().backward();
  (lp_ref * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(a.grad().to(torch::kFloat32), b.grad().to(torch::kFloat32), tol, tol));

  auto a2 = base.detach().clone().requires_grad_(true);
  auto b2 = base.detach().clone().requires_grad_(true);
  auto h = token_entropy(a2);
  auto h_ref = plain_entropy(b2);
  EXPECT_EQ(h.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(h, h_ref, tol, tol)) << (h - h_ref).abs().max();
  (h * upstream).sum().backward();
  (h_ref * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(a2.grad().to(torch::kFloat32), b2.grad().to(torch::kFloat32), tol, tol));
}
}  // namespace

TEST(TokenLogprobs, ValuesAndGradientsMatchLogSoftmax) {
  torch::manual_seed(3);
  auto logits = torch::randn({2, 3, 5}) * 2;
  auto tokens = torch::randint(5, {2, 3}, torch::kLong);
  compare_with_plain(logits, tokens, 1e-5);
}

TEST(TokenLogprobs, ByHandOnUniformLogits) {
  // Equal logits over 4 tokens: log-prob log(1/4) = -1.3862944, entropy log 4 = 1.3862944.
  auto logits = torch::zeros({1, 2, 4});
  expect_rows(token_logprobs(logits, t2({{0, 3}}, torch::kLong)), {{-1.3862944, -1.3862944}});
  expect_rows(token_entropy(logits), {{1.3862944, 1.3862944}});
}

TEST(TokenLogprobs, NonContiguousAndBfloat16Logits) {
  torch::manual_seed(4);
  // logits[:, :-1] as a policy uses them: a view that cannot be flattened without a copy.
  auto full = torch::randn({3, 5, 7});
  auto view = full.narrow(1, 0, 4);
  auto tokens = torch::randint(7, {3, 4}, torch::kLong);
  compare_with_plain(view, tokens, 1e-5);
  // bf16 logits: the same as float32 arithmetic on the upcast values; the gradient comes back bf16.
  auto bf = (torch::randn({2, 3, 6}) * 3).to(torch::kBFloat16).requires_grad_(true);
  auto tok = torch::randint(6, {2, 3}, torch::kLong);
  auto lp = token_logprobs(bf, tok);
  EXPECT_TRUE(torch::allclose(lp, plain_logprobs(bf.detach(), tok), 1e-5, 1e-5));
  lp.sum().backward();
  EXPECT_EQ(bf.grad().scalar_type(), torch::kBFloat16);
}

TEST(TokenLogprobs, LargeVocabularyGoesThroughSeveralBlocks) {
  // With 2^21 logits per position a block holds 8 positions: 10 positions of one sequence split
  // into 8 + 2, and 3 sequences of 3 positions into 2 + 1 sequences.
  torch::manual_seed(5);
  const int64_t V = int64_t(1) << 21;
  for (auto shape : {std::vector<int64_t>{1, 10}, std::vector<int64_t>{3, 3}}) {
    auto logits = torch::randn({shape[0], shape[1], V});
    auto tokens = torch::randint(V, {shape[0], shape[1]}, torch::kLong);
    compare_with_plain(logits, tokens, 1e-4);
  }
}

TEST(TokenLogprobs, ShapeErrors) {
  auto e = test::error_of([] { token_logprobs(torch::zeros({2, 3, 5}), torch::zeros({2, 4}, torch::kLong)); });
  EXPECT_NE(e.find("tokens [2, 4] must be [B, T] of logits [2, 3, 5]"), std::string::npos) << e;
  e = test::error_of([] { token_entropy(torch::zeros({2, 3})); });
  EXPECT_NE(e.find("logits must be a floating-point [B, T, V] tensor, got [2, 3]"), std::string::npos) << e;
}

// ---- PPO losses ---------------------------------------------------------------------------

TEST(PpoPolicyLoss, ClippingLossSignAndGradient) {
  // ratios 1.5 1.5 0.5 0.5 1.0 (old log-prob -1), eps 0.2, advantages 1 -1 -1 1 2; last masked.
  //   r 1.5, A  1: min(1.5, 1.2) = 1.2     clipped   -> loss -1.2, no gradient
  //   r 1.5, A -1: min(-1.5, -1.2) = -1.5  unclipped -> loss  1.5
  //   r 0.5, A -1: min(-0.5, -0.8) = -0.8  clipped   -> loss  0.8, no gradient
  //   r 0.5, A  1: min(0.5, 0.8) = 0.5     unclipped -> loss -0.5
  //   r 1.0, A  2: 2 = 2                   unclipped -> loss -2
  // loss = (-1.2 + 1.5 + 0.8 - 0.5 - 2) / 5 = -0.28; clip fraction 2 / 5.
  // approx_kl: (r - 1) - log r = 0.5 - 0.4054651 = 0.0945349 (twice), -0.5 + 0.6931472 =
  // 0.1931472 (twice), 0: sum 0.5753642, mean 0.1150728.
  std::vector<double> ratio = {1.5, 1.5, 0.5, 0.5, 1.0, 1.0};
  Rows lp(1);
  for (double r : ratio) lp[0].push_back(-1.0 + std::log(r));
  lp[0][5] = kNaN;
  auto logp = t2(lp).requires_grad_(true);
  auto old = t2({{-1, -1, -1, -1, -1, -1}});
  auto adv = t2({{1, -1, -1, 1, 2, kNaN}});
  auto mask = t2({{1, 1, 1, 1, 1, 0}}, torch::kLong);
  auto out = ppo_policy_loss(logp, old, adv, mask, 0.2);
  EXPECT_NEAR(scalar(out.loss), -0.28, 1e-6);
  EXPECT_NEAR(scalar(out.clip_fraction), 0.4, 1e-6);
  EXPECT_NEAR(scalar(out.approx_kl), 0.1150728, 1e-6);
  EXPECT_FALSE(out.clip_fraction.requires_grad());
  EXPECT_FALSE(out.approx_kl.requires_grad());
  out.loss.backward();
  // d loss / d logp = -r A / 5 on unclipped tokens (d r / d logp = r): 0, 0.3, 0, -0.1, -0.4, 0.
  // Gradient descent therefore raises the log-probs of tokens with positive advantage.
  expect_rows(logp.grad(), {{0, 0.3, 0, -0.1, -0.4, 0}});
}

TEST(PpoValueLoss, WithAndWithoutClip) {
  // V = 1, 2, 0; old = 0.5, 2.5, 0.5; R = 2, 1, 0.3; the fourth token is masked.
  auto v = t2({{1.0, 2.0, 0.0, kNaN}}).requires_grad_(true);
  auto old = t2({{0.5, 2.5, 0.5, kNaN}});
  auto ret = t2({{2.0, 1.0, 0.3, kNaN}});
  auto mask = t2({{1, 1, 1, 0}});
  // No clip: errors 1, 1, 0.09; 0.5 * 2.09 / 3 = 0.3483333.
  auto plain = ppo_value_loss(v, old, ret, mask, 0.0);
  EXPECT_NEAR(scalar(plain.loss), 0.5 * 2.09 / 3, 1e-6);
  EXPECT_EQ(scalar(plain.clip_fraction), 0.0);
  // Clip 0.2: clipped V = 0.7, 2.3, 0.3; clipped errors 1.69, 1.69, 0; max with 1, 1, 0.09:
  // 1.69, 1.69, 0.09 -> 0.5 * 3.47 / 3 = 0.5783333; clipped branch larger on 2 of 3.
  auto clipped = ppo_value_loss(v, old, ret, mask, 0.2);
  EXPECT_NEAR(scalar(clipped.loss), 0.5 * 3.47 / 3, 1e-6);
  EXPECT_NEAR(scalar(clipped.clip_fraction), 2.0 / 3, 1e-6);
  clipped.loss.backward();
  // Tokens 0 and 1 take the clipped branch (no gradient: V is outside the clip range); token 2:
  // d/dV 0.5 * (V - R)^2 / 3 = (0 - 0.3) / 3 = -0.1.
  expect_rows(v.grad(), {{0, 0, -0.1, 0}});
}

TEST(KlLoss, K3MeanWithGradThroughLogp) {
  // r = -0.5 and 1: k3 = 0.1065307 and 0.7182818, mean 0.4124062.
  // d k3 / d logp = 1 - exp(r): 0.3934693 and -1.7182818, halved by the mean.
  auto logp = t2({{-1.0, -2.0, kNaN}}).requires_grad_(true);
  auto ref = t2({{-1.5, -1.0, -3.0}});
  auto loss = kl_loss(logp, ref, t2({{1, 1, 0}}, torch::kLong));
  EXPECT_NEAR(scalar(loss), (0.10653066 + 0.71828183) / 2, 1e-6);
  loss.backward();
  expect_rows(logp.grad(), {{0.39346934 / 2, -1.71828183 / 2, 0}});
}

// ---- learning-rate schedules --------------------------------------------------------------

TEST(LearningRate, WarmupThenEachSchedule) {
  // total 11, warm-up 2, lr 1, floor 0.1: steps 0, 1 -> 0.5, 1.0; decay over steps 2 .. 10
  // (span 8). Step 4 is p = 0.25: linear 0.1 + 0.9 * 0.75 = 0.775; cosine 0.1 + 0.9 *
  // (1 + cos(pi / 4)) / 2 = 0.1 + 0.9 * 0.8535534 = 0.8681981. Step 6 (p = 0.5): 0.55 for both.
  for (LrSchedule s : {LrSchedule::constant, LrSchedule::linear, LrSchedule::cosine}) {
    EXPECT_DOUBLE_EQ(learning_rate(0, 11, 2, 1.0, s, 0.1), 0.5) << name_of(s);
    EXPECT_DOUBLE_EQ(learning_rate(1, 11, 2, 1.0, s, 0.1), 1.0) << name_of(s);
    EXPECT_DOUBLE_EQ(learning_rate(2, 11, 2, 1.0, s, 0.1), 1.0) << name_of(s);
  }
  EXPECT_DOUBLE_EQ(learning_rate(6, 11, 2, 1.0, LrSchedule::constant, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 11, 2, 1.0, LrSchedule::constant, 0.1), 1.0);
  EXPECT_NEAR(learning_rate(4, 11, 2, 1.0, LrSchedule::linear, 0.1), 0.775, 1e-12);
  EXPECT_NEAR(learning_rate(6, 11, 2, 1.0, LrSchedule::linear, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(10, 11, 2, 1.0, LrSchedule::linear, 0.1), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(4, 11, 2, 1.0, LrSchedule::cosine, 0.1), 0.86819805, 1e-8);
  EXPECT_NEAR(learning_rate(6, 11, 2, 1.0, LrSchedule::cosine, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(10, 11, 2, 1.0, LrSchedule::cosine, 0.1), 0.1, 1e-12);
  // No warm-up, lr 3e-6: step 0 is the full rate.
  EXPECT_DOUBLE_EQ(learning_rate(0, 5, 0, 3e-6, LrSchedule::linear, 0.0), 3e-6);
  EXPECT_NE(test::error_of([] { learning_rate(11, 11, 2, 1.0, LrSchedule::linear, 0.1); }).find("step 11 is outside 0 .. 10"),
            std::string::npos);
  // An unknown schedule is the deck's to refuse, by name.
  const std::string refused = test::error_of(
      [] { load_config(Deck("t.deck", "[train]\nschedule = exp\n", {}, deck_schema())); });
  EXPECT_NE(refused.find("t.deck:2: train.schedule is 'exp'; expected one of: constant | linear | cosine"),
            std::string::npos) << refused;
}

}  // namespace test_rl_math
