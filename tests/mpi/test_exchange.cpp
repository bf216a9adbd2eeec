// The group-to-group exchange between real MPI processes: the route, bit-exact delivery of every
// row in both directions for groups of many shapes (disjoint, overlapping and colocated), and
// refusal of malformed batches. Runs at 2, 4 and 8 ranks; the groups adapt to the world size.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/dist/exchange.hpp"
#include "quartet/dist/watchdog.hpp"
#include "test_main.hpp"

namespace quartet {
namespace test_exchange {

using test::world;

// ---- route -------------------------------------------------------------------------------

TEST(ExchangeRoute, SourcesAndDestinationsAreInverses) {
  for (int ns = 1; ns <= 9; ++ns) {
    for (int nd = 1; nd <= 9; ++nd) {
      SCOPED_TRACE(std::to_string(ns) + " -> " + std::to_string(nd));
      std::set<std::pair<int, int>> by_source, by_destination;
      for (int i = 0; i < ns; ++i) {
        auto to = GroupExchange::destinations_of(i, ns, nd);
        EXPECT_FALSE(to.empty()) << "source " << i << " sends nowhere";
        EXPECT_TRUE(std::is_sorted(to.begin(), to.end()));
        if (ns >= nd) {
          EXPECT_EQ(to, std::vector<int>{i % nd});
        }
        for (int j : to) {
          EXPECT_TRUE(j >= 0 && j < nd) << j;
          EXPECT_TRUE(by_source.insert({i, j}).second) << "pair " << i << "," << j << " twice";
        }
      }
      for (int j = 0; j < nd; ++j) {
        auto from = GroupExchange::sources_of(j, ns, nd);
        EXPECT_FALSE(from.empty()) << "destination " << j << " gets nothing";
        EXPECT_TRUE(std::is_sorted(from.begin(), from.end()));
        if (ns < nd) {
          EXPECT_EQ(from, std::vector<int>{j % ns});
        }
        for (int i : from) {
          EXPECT_TRUE(i >= 0 && i < ns) << i;
          EXPECT_TRUE(by_destination.insert({i, j}).second) << "pair " << i << "," << j << " twice";
        }
      }
      EXPECT_EQ(by_source, by_destination);
      EXPECT_EQ(by_source.size(), static_cast<std::size_t>(std::max(ns, nd)));
    }
  }
}

TEST(ExchangeRoute, RefusesBadQueries) {
  EXPECT_THROW(GroupExchange::destinations_of(3, 3, 2), Error);
  EXPECT_THROW(GroupExchange::destinations_of(0, 0, 2), Error);
  EXPECT_THROW(GroupExchange::sources_of(-1, 3, 2), Error);
  EXPECT_THROW(GroupExchange::sources_of(0, 3, 0), Error);
}

TEST(Exchange, RefusesBadGroups) {
  const World& w = world();
  const auto cpu = torch::Device(torch::kCPU);
  EXPECT_THROW(GroupExchange(w, "dup", {0, 0}, {0}, 1, cpu), Error);
  EXPECT_THROW(GroupExchange(w, "outside", {0}, {w.size()}, 1, cpu), Error);
  EXPECT_THROW(GroupExchange(w, "empty", {}, {0}, 1, cpu), Error);
  EXPECT_THROW(GroupExchange(w, "tag", {0}, {0}, -1, cpu), Error);
  EXPECT_NO_THROW(GroupExchange(w, "fine", {0}, {0}, 1, cpu));
}

// ---- batches -----------------------------------------------------------------------------

// Source i's batch differs in rows and width from every other source; source 1 has no rows.
std::int64_t rows_of_source(int i, int iteration) {
  return i == 1 ? 0 : 3 + 2 * i + iteration * (i % 3);
}
std::int64_t width_of_source(int i) { return 2 + i; }
std::int64_t first_row_of_source(int i, int iteration) {
  std::int64_t first = 0;
  for (int k = 0; k < i; ++k) first += rows_of_source(k, iteration);
  return first;
}

// Rows [lo, hi) of source i's batch: global row ids, exact floats, bfloat16 with NaN, -inf and
// -0.0 in places, a bool mask, and a tensor of zero bytes.
Batch make_rows(int i, int iteration, std::int64_t lo, std::int64_t hi) {
  const std::int64_t n = hi - lo, base = first_row_of_source(i, iteration) + lo;
  auto ids = torch::arange(base, base + n, torch::kInt64);
  auto values = ids.to(torch::kFloat32).unsqueeze(1) * 8 +
                torch::arange(width_of_source(i), torch::kFloat32) + 0.5;
  auto special = ids.to(torch::kFloat32).view({n, 1, 1}) * 0.5 -
                 torch::arange(6, torch::kFloat32).view({1, 2, 3});
  auto marked = (ids % 5 == 2).view({n, 1, 1});
  auto pos = torch::arange(6).view({1, 2, 3});
  auto put = [&](int at, float v) {
    special = torch::where(marked & (pos == at), torch::full_like(special, v), special);
  };
  put(0, std::numeric_limits<float>::quiet_NaN());
  put(5, -std::numeric_limits<float>::infinity());
  put(1, -0.0f);
  return {ids, values, special.to(torch::kBFloat16), ids % 3 == 0,
          torch::empty({n, 0}, torch::kInt32)};
}

Batch source_batch(int i, int iteration) {
  return make_rows(i, iteration, 0, rows_of_source(i, iteration));
}

// What destination j must get from source i, worked out without tensor_split: near-equal parts
// in destination order, the first (rows % parts) of them one row longer.
Batch expected_piece(int i, int j, int ns, int nd, int iteration) {
  const std::int64_t rows = rows_of_source(i, iteration);
  if (ns >= nd) return make_rows(i, iteration, 0, rows);
  const auto to = GroupExchange::destinations_of(i, ns, nd);
  const std::int64_t k = static_cast<std::int64_t>(to.size());
  const std::int64_t q = std::find(to.begin(), to.end(), j) - to.begin();
  const std::int64_t lo = q * (rows / k) + std::min(q, rows % k);
  return make_rows(i, iteration, lo, lo + rows / k + (q < rows % k ? 1 : 0));
}

// The destinations' work in backward(): row-wise, so it can be checked on the whole batch.
Batch answer(const Batch& piece) {
  return {piece[0] * -1, piece[1].to(torch::kFloat64).sum(1), piece[2], piece[3].logical_not()};
}

void expect_bitwise_equal(const Batch& got, const Batch& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE(what + ", tensor " + std::to_string(k));
    ASSERT_EQ(got[k].scalar_type(), want[k].scalar_type());
    ASSERT_EQ(got[k].sizes().vec(), want[k].sizes().vec());
    EXPECT_TRUE(got[k].device().is_cpu());
    auto a = got[k].contiguous(), b = want[k].contiguous();
    if (a.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "bytes differ; got\n"
                                                                        << a << "\nwant\n"
                                                                        << b;
    }
  }
}

int index_in(const std::vector<int>& group, int rank) {
  auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : static_cast<int>(it - group.begin());
}

// ---- forward and backward between groups ----------------------------------------------------

struct Case {
  std::string name;
  std::vector<int> src, dst;
};

std::vector<int> ranks(int first, int count) {
  std::vector<int> r(static_cast<std::size_t>(count));
  for (int k = 0; k < count; ++k) r[static_cast<std::size_t>(k)] = first + k;
  return r;
}

std::vector<Case> cases_for(int n) {
  auto reversed = [](std::vector<int> v) { return std::vector<int>(v.rbegin(), v.rend()); };
  std::vector<Case> cases = {
      {"1 to rest", ranks(0, 1), ranks(1, n - 1)},
      {"rest to 1", ranks(0, n - 1), ranks(n - 1, 1)},
      {"colocated", ranks(0, n), ranks(0, n)},
      // Overlapping groups in scrambled order; the second one splits pieces to itself.
      {"overlap, more sources", ranks(0, n / 2 + 1), reversed(ranks(n / 2, n - n / 2))},
      {"overlap, more destinations", reversed(ranks(n / 2, n - n / 2)), ranks(0, n / 2 + 1)},
  };
  if (n >= 5) {
    cases.push_back({"3 to 2", ranks(0, 3), ranks(3, 2)});
    cases.push_back({"2 to 3", ranks(0, 2), ranks(2, 3)});
  }
  if (n >= 8) {
    cases.push_back({"5 to 3", ranks(0, 5), ranks(5, 3)});
    cases.push_back({"3 to 5", ranks(0, 3), ranks(3, 5)});
  }
  return cases;
}

TEST(Exchange, ForwardAndBackwardDeliverEveryRowBitExactly) {
  const World& w = world();
  // A hang here becomes a report naming the exchange and the rank it waits for.
  Watchdog dog(120.0);
  const auto cases = cases_for(w.size());
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Case& cs = cases[c];
    SCOPED_TRACE(cs.name);
    const int ns = static_cast<int>(cs.src.size()), nd = static_cast<int>(cs.dst.size());
    const int si = index_in(cs.src, w.rank()), di = index_in(cs.dst, w.rank());
    GroupExchange ex(w, cs.name, cs.src, cs.dst, 100 + static_cast<int>(c), torch::kCPU, &dog);
    // Two iterations with different row counts: shapes travel with every message.
    for (int it = 0; it < 2; ++it) {
      SCOPED_TRACE("iteration " + std::to_string(it));
      const Batch mine = si >= 0 ? source_batch(si, it) : Batch{};
      const std::vector<Batch> got = ex.forward(mine);
      if (di < 0) {
        EXPECT_TRUE(got.empty());
      } else {
        const auto from = GroupExchange::sources_of(di, ns, nd);
        EXPECT_EQ(got.size(), from.size());
        for (std::size_t p = 0; p < std::min(got.size(), from.size()); ++p)
          expect_bitwise_equal(
              got[p], expected_piece(from[p], di, ns, nd, it),
              "piece " + std::to_string(p) + " from source " + std::to_string(from[p]));
      }
      std::vector<Batch> results;
      for (const auto& piece : got) results.push_back(answer(piece));
      const Batch back = ex.backward(results);
      if (si < 0) {
        EXPECT_TRUE(back.empty());
      } else {
        expect_bitwise_equal(back, answer(mine), "rows returned to source " + std::to_string(si));
      }
    }
  }
  EXPECT_EQ(dog.pending(), 0u);
}

// ---- single-rank exchanges: errors leave no other rank waiting -----------------------------

bool mentions(const Error& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

TEST(Exchange, RefusesResultsWithTheWrongRowCount) {
  const int me = world().rank();
  GroupExchange ex(world(), "self", {me}, {me}, 7, torch::kCPU);
  const Batch mine = {torch::arange(4), torch::ones({4, 2})};
  const auto got = ex.forward(mine);
  ASSERT_EQ(got.size(), 1u);
  try {
    ex.backward({{torch::zeros({3})}});
    ADD_FAILURE() << "a 3-row result for a 4-row piece was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e, "exchange 'self' backward") && mentions(e, "piece 0") &&
                mentions(e, "3 rows, expected 4"))
        << e.what();
  }
  try {
    ex.backward({});
    ADD_FAILURE() << "no result batch for one piece was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e, "got 0 result batches for the 1 pieces")) << e.what();
  }
  // Nothing was sent by the refused calls: a correct answer still goes through.
  const Batch back = ex.backward({{got[0][0] * 2}});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(torch::equal(back[0], mine[0] * 2));
}

TEST(Exchange, RefusesMalformedBatches) {
  const int me = world().rank();
  GroupExchange ex(world(), "self", {me}, {me}, 8, torch::kCPU);
  try {
    ex.forward({torch::arange(4), torch::ones({3, 2})});
    ADD_FAILURE() << "tensors with different row counts were accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e, "exchange 'self' forward: tensor 1 has shape [3, 2]") &&
                mentions(e, "tensor 0 has shape [4]"))
        << e.what();
  }
  try {
    ex.forward({torch::tensor(5)});
    ADD_FAILURE() << "a 0-dimensional tensor was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e, "tensor 0 has shape []")) << e.what();
  }
  const auto got = ex.forward({torch::arange(2)});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_TRUE(torch::equal(got[0][0], torch::arange(2)));
}

TEST(Exchange, SplitsMessagesLargerThanOneGiB) {
  // 2 GiB of buffers on one rank; once is enough, so only at the smallest world size.
  if (world().size() != 2 || world().rank() != 0) GTEST_SKIP() << "runs on rank 0 of 2";
  const std::int64_t half = (std::int64_t{1} << 29) + 1000;  // 2 rows: 1 GiB + 2000 bytes
  auto big = torch::zeros({2, half}, torch::kUInt8);
  auto flat = big.view({-1});
  const std::int64_t gib = std::int64_t{1} << 30;
  // Distinct bytes on both sides of the chunk boundary and at both ends.
  for (std::int64_t at : {std::int64_t{0}, gib - 100, 2 * half - 200})
    flat.narrow(0, at, 200).copy_(torch::arange(1, 201).to(torch::kUInt8));
  GroupExchange ex(world(), "big", {0}, {0}, 9, torch::kCPU);
  const auto got = ex.forward({big});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_NE(got[0][0].data_ptr(), big.data_ptr());
  EXPECT_TRUE(torch::equal(got[0][0], big));
  const Batch back = ex.backward({{got[0][0].narrow(1, 0, 1)}});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(torch::equal(back[0], big.narrow(1, 0, 1)));
}

TEST(Exchange, DeliversOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int me = world().rank();
  const torch::Device gpu(
      torch::kCUDA, static_cast<c10::DeviceIndex>(world().local_rank() %
                                                  static_cast<int>(torch::cuda::device_count())));
  GroupExchange ex(world(), "gpu", {me}, {me}, 10, gpu);
  const Batch mine = {torch::arange(6, torch::TensorOptions(gpu)).view({3, 2})};
  const auto got = ex.forward(mine);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[0][0].device(), gpu);
  EXPECT_TRUE(torch::equal(got[0][0], mine[0]));
  const Batch back = ex.backward({{got[0][0] + 1}});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].device(), gpu);
  EXPECT_TRUE(torch::equal(back[0], mine[0] + 1));
}

}  // namespace test_exchange
}  // namespace quartet
