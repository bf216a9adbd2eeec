// The MPI world: local ranks from host hashes, agreement on errors.
#include <gtest/gtest.h>

#include "quartet/core/check.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_world {

TEST(World, LocalRankFromHostHashes) {
  // Ranks 0,2,3 on host A and 1,4 on host B.
  std::vector<std::uint64_t> h = {11, 22, 11, 11, 22};
  EXPECT_EQ(local_rank_of(h, 0), 0);
  EXPECT_EQ(local_rank_of(h, 1), 0);
  EXPECT_EQ(local_rank_of(h, 3), 2);
  EXPECT_EQ(local_rank_of(h, 4), 1);
  EXPECT_EQ(local_size_of(h, 2), 3);
  EXPECT_EQ(local_size_of(h, 4), 2);
  EXPECT_NE(host_hash("node1", "boot-a"), host_hash("node1", "boot-b"));
  EXPECT_NE(host_hash("node1", "boot-a"), host_hash("node2", "boot-a"));
  EXPECT_EQ(host_hash("node1", "boot-a"), host_hash("node1", "boot-a"));
}

TEST(World, AllRanksOfThisTestShareOneHost) {
  const World& w = test::world();
  EXPECT_GE(w.size(), 2);
  EXPECT_EQ(w.local_size(), w.size());
  EXPECT_EQ(w.local_rank(), w.rank());
  for (auto h : w.all_host_hashes()) EXPECT_EQ(h, w.host_hash());
  EXPECT_EQ(w.host_hash(), host_hash(this_hostname(), this_boot_id()));
}

TEST(World, AgreementFailsEverywhereWhenOneRankFails) {
  const World& w = test::world();
  EXPECT_TRUE(w.agree([] {}));
  int bad = w.size() - 1;
  ::testing::internal::CaptureStderr();
  bool ok = w.agree([&] {
    if (w.rank() == bad) throw Error("deck.ini:3: placement.actor is wrong");
  });
  std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(ok);
  // Rank 0 had no error, so the failing rank reports its own.
  if (w.rank() == bad) {
    EXPECT_NE(printed.find("placement.actor is wrong"), std::string::npos) << printed;
  } else {
    EXPECT_EQ(printed, "");
  }
  EXPECT_TRUE(w.all_ok(true));
  EXPECT_FALSE(w.all_ok(w.rank() != 0));
}

}  // namespace test_world
