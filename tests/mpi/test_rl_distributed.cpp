// Advantage statistics over a whole actor group: each rank holds some rows of one global batch
// (unequal numbers of rows and of action tokens per rank), and masked_whiten, masked_mean,
// RunningMoments and the full PPO and REINFORCE++ advantage pipelines with the group must give
// each rank exactly what one process computes on the whole batch, for its rows.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "quartet/dist/collectives.hpp"
#include "quartet/engine/running_moments.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rl_distributed {

namespace {

constexpr int64_t kRows = 13, kT = 7;  // 13 rows: never an even split over 2 or 4 ranks

// The same global batch on every rank (seeded): log-probs, values, scores and a response mask
// 1...1 0...0 of random length 0 .. T per row (row 5 is empty on purpose).
struct Batch {
  torch::Tensor logp, ref_logp, values, scores, mask;
};
Batch global_batch(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Batch b;
  b.logp = -torch::rand({kRows, kT}, gen) * 3;
  b.ref_logp = b.logp + torch::randn({kRows, kT}, gen) * 0.3;
  b.values = torch::randn({kRows, kT}, gen) + 2.0;  // a mean away from 0 for the whitening
  b.scores = torch::randn({kRows}, gen) * 4;
  auto len = torch::randint(kT + 1, {kRows}, gen, torch::kLong);
  len[5] = 0;
  b.mask = torch::arange(kT, torch::kLong).unsqueeze(0).lt(len.unsqueeze(1)).to(torch::kLong);
  return b;
}

// This rank's rows: rank r of n takes rows [begin, begin + count), the first kRows % n ranks one
// more than the others.
struct Rows {
  int64_t begin, count;
};
Rows rows_of(int64_t r) {
  const int64_t n = test::world().size();
  const int64_t base = kRows / n, extra = kRows % n;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}
Rows my_rows() { return rows_of(test::world().rank()); }
torch::Tensor mine(const torch::Tensor& t) {
  auto r = my_rows();
  return t.narrow(0, r.begin, r.count).contiguous();
}

std::unique_ptr<Collectives> world_group() {
  std::vector<int> ranks(test::world().size());
  std::iota(ranks.begin(), ranks.end(), 0);
  return make_mpi_collectives("rl_test", ranks, test::world().comm(), nullptr);
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol = 1e-6) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const double err = (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
  EXPECT_LE(err, tol) << "rank " << test::world().rank();
}

}  // namespace

TEST(RlDistributed, MaskedWhitenAndMeanEqualTheWholeBatch) {
  auto group = world_group();
  auto b = global_batch(11);
  for (bool shift : {true, false}) {
    auto whole = masked_whiten(b.values, b.mask, nullptr, shift);
    expect_close(masked_whiten(mine(b.values), mine(b.mask), group.get(), shift), mine(whole));
  }
  expect_close(masked_mean(mine(b.values), mine(b.mask), group.get()), masked_mean(b.values, b.mask));
  // The test has teeth: this rank's rows whitened on their own are not the whole batch's.
  const double alone = (masked_whiten(mine(b.values), mine(b.mask)) - mine(masked_whiten(b.values, b.mask)))
                           .abs().max().item<double>();
  EXPECT_GT(alone, 1e-3) << "rank " << test::world().rank();
  // A rank may hold no action tokens at all (here rank 0): the group's statistics are still
  // those of the other ranks' tokens, and that rank gets zeros back.
  auto global_mask = b.mask.clone();
  global_mask.narrow(0, rows_of(0).begin, rows_of(0).count).zero_();
  auto local_mask = mine(global_mask);
  expect_close(masked_mean(mine(b.values), local_mask, group.get()), masked_mean(b.values, global_mask));
  expect_close(masked_whiten(mine(b.values), local_mask, group.get()),
               mine(masked_whiten(b.values, global_mask)));
}

TEST(RlDistributed, RunningMomentsEqualTheWholeBatch) {
  auto group = world_group();
  RunningMoments dist, single;
  for (uint64_t seed : {21, 22, 23}) {
    auto b = global_batch(seed);
    dist.update(mine(b.scores), group.get());
    single.update(b.scores);
    EXPECT_NEAR(dist.mean, single.mean, 1e-9);
    EXPECT_NEAR(dist.var, single.var, 1e-9);
    EXPECT_EQ(dist.count, single.count);
    EXPECT_EQ(dist.count, double(kRows) * (seed - 20));
  }
  auto probe = torch::linspace(-3, 3, 5);
  expect_close(dist.normalise(probe), single.normalise(probe));
}

TEST(RlDistributed, PpoAdvantagePipelineEqualsTheWholeBatch) {
  auto group = world_group();
  auto b = global_batch(31);
  const double kl_coef = 0.05, gamma = 1.0, lambda = 0.95;
  for (auto est : {KlEstimator::k1, KlEstimator::k3}) {
    // One process, the whole batch.
    auto kl = kl_estimate(b.logp, b.ref_logp, b.mask, est);
    auto ar = gae(token_rewards(b.scores, kl, b.mask, kl_coef), b.values, b.mask, gamma, lambda);
    auto adv = masked_whiten(ar.advantages, b.mask);
    // This rank's rows, whitened over the group.
    auto kl_r = kl_estimate(mine(b.logp), mine(b.ref_logp), mine(b.mask), est);
    auto ar_r = gae(token_rewards(mine(b.scores), kl_r, mine(b.mask), kl_coef), mine(b.values), mine(b.mask),
                    gamma, lambda);
    auto adv_r = masked_whiten(ar_r.advantages, mine(b.mask), group.get());
    expect_close(ar_r.returns, mine(ar.returns));
    expect_close(adv_r, mine(adv));
  }
}

TEST(RlDistributed, ReinforcePlusPlusPipelineEqualsTheWholeBatch) {
  auto group = world_group();
  auto b = global_batch(41);
  auto kl = kl_estimate(b.logp, b.ref_logp, b.mask, KlEstimator::k2);
  auto ret = discounted_returns(token_rewards(b.scores, kl, b.mask, 0.1), b.mask, 0.99);
  auto adv = masked_whiten(ret, b.mask);
  auto kl_r = kl_estimate(mine(b.logp), mine(b.ref_logp), mine(b.mask), KlEstimator::k2);
  auto ret_r = discounted_returns(token_rewards(mine(b.scores), kl_r, mine(b.mask), 0.1), mine(b.mask), 0.99);
  expect_close(masked_whiten(ret_r, mine(b.mask), group.get()), mine(adv));
}

}  // namespace test_rl_distributed
