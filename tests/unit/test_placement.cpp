// Placement from the deck: layouts and every refusal, each naming the deck key and line.
#include <gtest/gtest.h>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/dist/placement.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_placement {

namespace {

struct Laid {
  Placement placement;
  std::string error;
};

Laid lay_out(const std::string& placement_section, int world_size) {
  Deck deck("p.deck", "[placement]\n" + placement_section, {}, deck_schema());
  Config c = load_config(deck);
  try {
    return {make_placement(c.get<PlacementConfig>(), world_size, c.deck), ""};
  } catch (const DeckError& e) {
    return {{}, e.what()};
  }
}

std::vector<int> iota(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(Placement, Disjoint4211On8Ranks) {
  auto l = lay_out("actor = 4\ncritic = 2\nreference = 1\nreward = 1\n", 8);
  ASSERT_EQ(l.error, "");
  const auto& p = l.placement;
  EXPECT_EQ(p.ranks_of(Role::actor), iota(0, 4));
  EXPECT_EQ(p.ranks_of(Role::critic), iota(4, 6));
  EXPECT_EQ(p.ranks_of(Role::reference), std::vector<int>{6});
  EXPECT_EQ(p.ranks_of(Role::reward), std::vector<int>{7});
  EXPECT_EQ(p.roles_of(5), std::vector<Role>{Role::critic});
  EXPECT_EQ(p.describe(), "disjoint: actor ranks 0-3 | critic ranks 4-5 | reference rank 6 | reward rank 7");
}

TEST(Placement, CriticFreeLayout) {
  auto l = lay_out("actor = 2\ncritic = 0\nreference = 1\nreward = 1\n", 4);
  ASSERT_EQ(l.error, "");
  EXPECT_FALSE(l.placement.has(Role::critic));
  EXPECT_EQ(l.placement.ranks_of(Role::reference), std::vector<int>{2});
  EXPECT_EQ(l.placement.ranks_of(Role::reward), std::vector<int>{3});
  // Roles left out of the deck are absent in disjoint mode: actor alone (rule reward, no KL).
  auto alone = lay_out("actor = 3\n", 3);
  ASSERT_EQ(alone.error, "");
  EXPECT_EQ(alone.placement.describe(), "disjoint: actor ranks 0-2");
}

TEST(Placement, ColocatedPutsEveryRoleOnEveryRank) {
  auto l = lay_out("mode = colocated\n", 4);
  ASSERT_EQ(l.error, "");
  for (Role r : kAllRoles) EXPECT_EQ(l.placement.ranks_of(r), iota(0, 4)) << role_name(r);
  EXPECT_EQ(l.placement.roles_of(2).size(), 4u);
  auto no_critic = lay_out("mode = colocated\ncritic = 0\nactor = 4\n", 4);
  ASSERT_EQ(no_critic.error, "");
  EXPECT_FALSE(no_critic.placement.has(Role::critic));
  EXPECT_TRUE(no_critic.placement.has(Role::reward));
}

TEST(PlacementRefusals, CountsMustAddUpToTheWorld) {
  EXPECT_EQ(lay_out("actor = 4\ncritic = 2\nreference = 1\nreward = 1\n", 6).error,
            "p.deck:2: placement.actor and the other role counts (actor + critic + reference + "
            "reward = 4 + 2 + 1 + 1) add up to 8 ranks, but the job has 6 (mpirun -np / srun -n)");
}

TEST(PlacementRefusals, ActorIsRequired) {
  EXPECT_EQ(lay_out("actor = 0\ncritic = 2\n", 2).error,
            "p.deck:2: placement.actor is 0: every layout needs at least one actor rank");
  EXPECT_EQ(lay_out("critic = 2\n", 2).error,
            "p.deck (default): placement.actor is not set: disjoint placement needs a rank count per role");
  EXPECT_EQ(lay_out("mode = colocated\nactor = 0\n", 2).error,
            "p.deck:3: placement.actor is 0: every layout needs the actor");
}

TEST(PlacementRefusals, ColocatedCountsMustSpanTheWorld) {
  EXPECT_EQ(lay_out("mode = colocated\ncritic = 2\n", 4).error,
            "p.deck:3: placement.critic is 2, but in colocated mode every role spans all 4 ranks: "
            "give 4, 0 (no critic) or leave it out");
}

TEST(PlacementGpus, RanksOfDifferentGroupsMayShareAGpu) {
  // Four roles on a 2-GPU host: ranks 0,2 on GPU 0 and 1,3 on GPU 1, one rank per group.
  auto l = lay_out("actor = 1\ncritic = 1\nreference = 1\nreward = 1\n", 4);
  ASSERT_EQ(l.error, "");
  std::vector<RankDevice> devs = {{7, "h", 0}, {7, "h", 1}, {7, "h", 0}, {7, "h", 1}};
  Deck deck("p.deck", "[placement]\nactor = 1\n", {}, deck_schema());
  EXPECT_NO_THROW(check_gpu_sharing(l.placement, devs, deck));
}

TEST(PlacementGpus, TwoRanksOfOneGroupOnOneGpuAreRefused) {
  std::string text = "[placement]\nactor = 2\ncritic = 1\nreward = 1\n";
  Deck deck("p.deck", text, {}, deck_schema());
  Config c = load_config(deck);
  Placement p = make_placement(c.get<PlacementConfig>(), 4, c.deck);
  std::vector<RankDevice> devs = {{7, "h", 0}, {7, "h", 0}, {7, "h", 1}, {7, "h", 1}};
  try {
    check_gpu_sharing(p, devs, c.deck);
    FAIL() << "two actor ranks on GPU 0 must be refused";
  } catch (const DeckError& e) {
    EXPECT_STREQ(e.what(),
                 "p.deck:2: placement.actor puts world ranks 0 and 1 on the same GPU (0 of host h), "
                 "and one NCCL communicator cannot hold two ranks of one GPU: give the actor fewer "
                 "ranks, run on more GPUs, or use dist.backend = mpi");
  }
  // The same GPU index on two different hosts is two GPUs.
  devs = {{7, "a", 0}, {8, "b", 0}, {7, "a", 1}, {8, "b", 1}};
  EXPECT_NO_THROW(check_gpu_sharing(p, devs, c.deck));
  // CPU ranks (gpu -1) never clash.
  devs = {{7, "h", -1}, {7, "h", -1}, {7, "h", -1}, {7, "h", -1}};
  EXPECT_NO_THROW(check_gpu_sharing(p, devs, c.deck));
}

TEST(Placement, RankLists) {
  EXPECT_EQ(rank_list({}), "none");
  EXPECT_EQ(rank_list({3}), "3");
  EXPECT_EQ(rank_list({0, 1, 2}), "0-2");
  EXPECT_EQ(rank_list({0, 2, 4}), "0,2,4");
}

}  // namespace test_placement
