// The pairwise losses (tune/pair_losses.hpp) on small hand-made cases: each expected value is
// worked out here from the formula with scalar arithmetic, each gradient both from its closed
// form and by central differences in float64, never taken from the implementation.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/tune/pair_losses.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_pair_losses {

namespace {

torch::Tensor vec(const std::vector<double>& v, bool grad = false) {
  auto t = torch::tensor(v, torch::kFloat64);
  return grad ? t.requires_grad_() : t;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double log_sigmoid(double x) { return -std::log1p(std::exp(-x)); }

void expect_vec(const torch::Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.dim(), 1);
  ASSERT_EQ(got.size(0), int64_t(want.size()));
  const auto g = got.to(torch::kFloat64);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[int64_t(i)].item<double>(), want[i], tol) << "at " << i;
}

// d loss / d x[i] by central differences of `loss` (float64), x perturbed one entry at a time.
std::vector<double> numeric_grad(const std::function<double(const torch::Tensor&)>& loss, const torch::Tensor& x) {
  const double h = 1e-6;
  std::vector<double> out;
  for (int64_t i = 0; i < x.size(0); ++i) {
    auto up = x.detach().clone(), down = x.detach().clone();
    up[i] += h;
    down[i] -= h;
    out.push_back((loss(up) - loss(down)) / (2 * h));
  }
  return out;
}

}  // namespace

// ---- Bradley–Terry --------------------------------------------------------------------------

// d = r_c - r_r - m: 2 - 1 - 0 = 1; 0.5 - 0.5 - 0 = 0 (a tie: wrong for accuracy); -1 - 1 - 0.5
// = -2.5. l_i = -log σ(d_i); dl/dr_c,i = -σ(-d_i) / N, dl/dr_r,i = +σ(-d_i) / N.
TEST(PairLosses, BradleyTerryWithAMarginPerPair) {
  const std::vector<double> c = {2.0, 0.5, -1.0}, r = {1.0, 0.5, 1.0}, m = {0.0, 0.0, 0.5};
  auto rc = vec(c, true), rr = vec(r, true);
  const PairLoss out = bradley_terry_loss(rc, rr, vec(m));
  std::vector<double> per, dc, dr;
  double mean = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double d = c[i] - r[i] - m[i];
    per.push_back(-log_sigmoid(d));
    mean += per.back() / 3;
    dc.push_back(-sigmoid(-d) / 3);
    dr.push_back(sigmoid(-d) / 3);
  }
  expect_vec(out.per_pair, per);
  EXPECT_NEAR(out.loss.item<double>(), mean, 1e-12);
  // The metrics are of the scores, without the margin.
  expect_vec(out.metrics.chosen, c);
  expect_vec(out.metrics.rejected, r);
  expect_vec(out.metrics.margins, {1.0, 0.0, -2.0});
  EXPECT_NEAR(out.metrics.accuracy.item<double>(), 1.0 / 3.0, 1e-12);
  EXPECT_FALSE(out.metrics.chosen.requires_grad());

  out.loss.backward();
  expect_vec(rc.grad(), dc);
  expect_vec(rr.grad(), dr);
  const auto f = [&](const torch::Tensor& x) { return bradley_terry_loss(x, vec(r), vec(m)).loss.item<double>(); };
  expect_vec(rc.grad(), numeric_grad(f, vec(c)), 1e-8);

  // Without a margin: the same as a zero one; log σ stays finite far out.
  const PairLoss plain = bradley_terry_loss(vec(c), vec(r));
  expect_vec(plain.per_pair, {-log_sigmoid(1.0), -log_sigmoid(0.0), -log_sigmoid(-2.0)});
  const PairLoss far = bradley_terry_loss(vec({-200.0}), vec({200.0}));
  EXPECT_NEAR(far.loss.item<double>(), 400.0, 1e-9);
  // bf16 scores come back as a float32 loss.
  EXPECT_EQ(bradley_terry_loss(vec(c).to(torch::kBFloat16), vec(r).to(torch::kBFloat16)).loss.scalar_type(),
            torch::kFloat32);
}

TEST(PairLosses, BradleyTerryRefusesMisshapenInput) {
  EXPECT_THROW(bradley_terry_loss(vec({1, 2}), vec({1})), Error);
  EXPECT_THROW(bradley_terry_loss(vec({1, 2}), vec({1, 2}), vec({0})), Error);
  EXPECT_THROW(bradley_terry_loss(torch::zeros({2, 1}, torch::kFloat64), torch::zeros({2, 1}, torch::kFloat64)), Error);
  EXPECT_THROW(bradley_terry_loss(torch::zeros({0}, torch::kFloat64), torch::zeros({0}, torch::kFloat64)), Error);
}

// ---- sequence log-probs -----------------------------------------------------------------------

// Row 0: three response tokens -1, -2, -3 (sum -6, mean -2); row 1: one token -0.5 and two
// masked slots, one NaN (which must not leak).
TEST(PairLosses, SequenceLogpsSumOrMeanOverResponseTokens) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto lp = torch::tensor({-1.0, -2.0, -3.0, -0.5, nan, -9.0}, torch::kFloat64).view({2, 3}).requires_grad_();
  const auto mask = torch::tensor({1, 1, 1, 1, 0, 0}, torch::kLong).view({2, 3});
  expect_vec(sequence_logps(lp, mask, PreferenceLossKind::sigmoid), {-6.0, -0.5});
  const auto mean = sequence_logps(lp, mask, PreferenceLossKind::ipo);
  expect_vec(mean, {-2.0, -0.5});
  mean.sum().backward();
  // d mean_b / d lp_bt = 1 / n_b on the response tokens, 0 elsewhere (and not NaN).
  const auto g = lp.grad();
  EXPECT_TRUE(torch::equal(g, torch::tensor({1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0, 0.0, 0.0}, torch::kFloat64).view({2, 3})))
      << g;
  EXPECT_THROW(sequence_logps(lp, torch::zeros({2, 3}, torch::kLong), PreferenceLossKind::sigmoid), Error);
  EXPECT_THROW(sequence_logps(lp, torch::ones({2, 2}, torch::kLong), PreferenceLossKind::sigmoid), Error);
}

// ---- DPO, conservative DPO, IPO ------------------------------------------------------------

namespace {

// Two pairs. h = (pc - rc) - (pr - rr): pair 0: (-3 + 3.5) - (-4 + 3.5) = 1; pair 1:
// (-5 + 4) - (-2 + 3) = -2.
struct DpoCase {
  std::vector<double> pc = {-3.0, -5.0}, pr = {-4.0, -2.0}, rc = {-3.5, -4.0}, rr = {-3.5, -3.0};
  std::vector<double> h = {1.0, -2.0};
  PairLogps logps(const torch::Tensor& policy_chosen, const torch::Tensor& policy_rejected) const {
    return {policy_chosen, policy_rejected, vec(rc), vec(rr)};
  }
};

}  // namespace

// l = -(1 - ε) log σ(βh) - ε log σ(-βh); dl/dpc = β(-(1 - ε) σ(-βh) + ε σ(βh)) / N = -dl/dpr.
// The implicit rewards are β (pc - rc) = β(0.5, -1) and β (pr - rr) = β(-0.5, 1).
TEST(PairLosses, DpoSigmoidAndConservative) {
  const DpoCase k;
  for (double eps : {0.0, 0.1}) {
    SCOPED_TRACE("label smoothing " + std::to_string(eps));
    const double beta = 0.5;
    auto pc = vec(k.pc, true), pr = vec(k.pr, true);
    const PairLoss out = dpo_loss(k.logps(pc, pr), {PreferenceLossKind::sigmoid, beta, eps});
    std::vector<double> per, dpc, dpr;
    for (double h : k.h) {
      per.push_back(-(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h));
      const double g = beta * (-(1 - eps) * sigmoid(-beta * h) + eps * sigmoid(beta * h)) / 2;
      dpc.push_back(g);
      dpr.push_back(-g);
    }
    expect_vec(out.per_pair, per);
    EXPECT_NEAR(out.loss.item<double>(), (per[0] + per[1]) / 2, 1e-12);
    expect_vec(out.metrics.chosen, {beta * 0.5, beta * -1.0});
    expect_vec(out.metrics.rejected, {beta * -0.5, beta * 1.0});
    expect_vec(out.metrics.margins, {beta * 1.0, beta * -2.0});
    EXPECT_NEAR(out.metrics.accuracy.item<double>(), 0.5, 1e-12);
    out.loss.backward();
    expect_vec(pc.grad(), dpc);
    expect_vec(pr.grad(), dpr);
    const auto f = [&](const torch::Tensor& x) {
      return dpo_loss(k.logps(vec(k.pc), x), {PreferenceLossKind::sigmoid, beta, eps}).loss.item<double>();
    };
    expect_vec(pr.grad(), numeric_grad(f, vec(k.pr)), 1e-8);
  }
}

// The reference takes no gradient, even when handed a tensor that has one.
TEST(PairLosses, DpoReferenceIsFrozen) {
  const DpoCase k;
  auto rc = vec(k.rc, true);
  auto pc = vec(k.pc, true);
  const PairLoss out = dpo_loss({pc, vec(k.pr), rc, vec(k.rr)}, {});
  out.loss.backward();
  EXPECT_FALSE(rc.grad().defined());
  EXPECT_TRUE(pc.grad().defined());
}

// IPO on token means: pair 0's chosen response has tokens (-1, -2) (mean -1.5), its rejected
// (-3) (mean -3); the reference's means -2 and -2.5. h = (-1.5 + 2) - (-3 + 2.5) = 1.
// Pair 1: chosen (-0.5, -0.5, -2) (mean -1), rejected (-1, -1) (mean -1); reference -1 and
// -0.25: h = 0 - (-0.75) = 0.75. l = (h - 1/(2β))^2 with β = 0.25: (1 - 2)^2 = 1,
// (0.75 - 2)^2 = 1.5625. dl/dpc_t = 2 (h - 1/(2β)) / n_c / N per token.
TEST(PairLosses, IpoOnTokenMeans) {
  const double beta = 0.25;
  auto tok_c = torch::tensor({-1.0, -2.0, 0.0, -0.5, -0.5, -2.0}, torch::kFloat64).view({2, 3}).requires_grad_();
  const auto mask_c = torch::tensor({1, 1, 0, 1, 1, 1}, torch::kLong).view({2, 3});
  const auto tok_r = torch::tensor({-3.0, 0.0, -1.0, -1.0}, torch::kFloat64).view({2, 2});
  const auto mask_r = torch::tensor({1, 0, 1, 1}, torch::kLong).view({2, 2});
  const auto kind = PreferenceLossKind::ipo;
  const PairLoss out = dpo_loss({sequence_logps(tok_c, mask_c, kind), sequence_logps(tok_r, mask_r, kind),
                                 vec({-2.0, -1.0}), vec({-2.5, -0.25})},
                                {kind, beta, 0.0});
  expect_vec(out.per_pair, {1.0, 1.5625});
  EXPECT_NEAR(out.loss.item<double>(), (1.0 + 1.5625) / 2, 1e-12);
  expect_vec(out.metrics.chosen, {beta * 0.5, beta * 0.0});
  expect_vec(out.metrics.rejected, {beta * -0.5, beta * -0.75});
  EXPECT_NEAR(out.metrics.accuracy.item<double>(), 1.0, 1e-12);
  out.loss.backward();
  const double g0 = 2 * (1.0 - 2.0) / 2 / 2, g1 = 2 * (0.75 - 2.0) / 3 / 2;
  EXPECT_TRUE(torch::allclose(tok_c.grad(), torch::tensor({g0, g0, 0.0, g1, g1, g1}, torch::kFloat64).view({2, 3}),
                              1e-12, 1e-12))
      << tok_c.grad();
}

TEST(PairLosses, DpoRefusesBadOptions) {
  const DpoCase k;
  const PairLogps l = k.logps(vec(k.pc), vec(k.pr));
  EXPECT_THROW(dpo_loss(l, {PreferenceLossKind::sigmoid, 0.0, 0.0}), Error);
  EXPECT_THROW(dpo_loss(l, {PreferenceLossKind::sigmoid, 0.1, 0.5}), Error);
  EXPECT_THROW(dpo_loss(l, {PreferenceLossKind::sigmoid, 0.1, -0.1}), Error);
  EXPECT_THROW(dpo_loss(l, {PreferenceLossKind::ipo, 0.1, 0.1}), Error);
  EXPECT_THROW(dpo_loss({vec(k.pc), vec({1.0}), vec(k.rc), vec(k.rr)}, {}), Error);
}

}  // namespace test_pair_losses
