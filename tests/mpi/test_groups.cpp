// Model groups from a placement: one sub-communicator and backend per group, collectives that
// stay inside their group, and the start-up that refuses bad decks on every rank alike.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cstdio>
#include <fstream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/groups.hpp"
#include "quartet/dist/runtime.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_groups {

namespace {

Placement placement_of(const std::string& section) {
  Config c = load_config(Deck("g.deck", "[placement]\n" + section, {}, deck_schema()));
  return make_placement(c.get<PlacementConfig>(), test::world().size(), c.deck);
}

// Each member adds its world rank: the sum must be the sum over the group's ranks only.
void expect_collectives_stay_inside(const ModelGroups& groups) {
  for (const auto& g : groups.all()) {
    if (!g->member()) continue;
    auto t = torch::tensor({static_cast<int64_t>(test::world().rank())});
    g->coll->all_reduce(t, ReduceOp::sum);
    int64_t expected = 0;
    for (int r : g->world_ranks) expected += r;
    EXPECT_EQ(t.item<int64_t>(), expected) << g->name;
    int size = 0;
    MPI_Comm_size(g->comm, &size);
    EXPECT_EQ(size, g->size());
    EXPECT_EQ(g->coll->rank(), g->rank);
  }
}

std::string deck_file(const std::string& text) {
  std::string path = "/tmp/quartet_test_groups_" + std::to_string(test::world().size()) + ".deck";
  if (test::world().rank() == 0) std::ofstream(path) << text;
  MPI_Barrier(test::world().comm());
  return path;
}

}  // namespace

TEST(Groups, DisjointOneGroupPerRole) {
  const World& w = test::world();
  int n = w.size();
  // 4 ranks: 1/1/1/1; 8 ranks: 4/2/1/1.
  std::string counts = n == 4 ? "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n"
                              : "actor = 4\ncritic = 2\nreference = 1\nreward = 1\n";
  Placement p = placement_of(counts);
  Watchdog dog(60);
  ModelGroups groups(w, p, Backend::mpi, &dog);
  ASSERT_EQ(groups.all().size(), 4u);
  int memberships = 0;
  for (Role r : kAllRoles) {
    const Group& g = groups.of(r);
    EXPECT_EQ(g.name, role_name(r));
    EXPECT_EQ(g.world_ranks, p.ranks_of(r));
    memberships += g.member();
    EXPECT_EQ(g.member(), g.coll != nullptr);
  }
  EXPECT_EQ(memberships, 1);  // disjoint: each rank holds exactly one model
  expect_collectives_stay_inside(groups);
}

TEST(Groups, ColocatedRolesShareOneGroup) {
  Placement p = placement_of("mode = colocated\ncritic = 0\n");
  Watchdog dog(60);
  ModelGroups groups(test::world(), p, Backend::mpi, &dog);
  ASSERT_EQ(groups.all().size(), 1u);
  EXPECT_EQ(groups.of(Role::actor).name, "actor+reference+reward");
  EXPECT_EQ(&groups.of(Role::reward), &groups.of(Role::actor));
  EXPECT_FALSE(groups.has(Role::critic));
  EXPECT_THROW(groups.of(Role::critic), Error);
  expect_collectives_stay_inside(groups);
}

TEST(Groups, CriticFreeDisjointLayout) {
  int n = test::world().size();
  Placement p = placement_of("actor = " + std::to_string(n - 2) + "\nreference = 1\nreward = 1\n");
  Watchdog dog(60);
  ModelGroups groups(test::world(), p, Backend::mpi, &dog);
  EXPECT_EQ(groups.all().size(), 3u);
  EXPECT_FALSE(groups.has(Role::critic));
  expect_collectives_stay_inside(groups);
}

TEST(Runtime, StartsFromADeckFile) {
  int n = test::world().size();
  auto rt = start_runtime(test::world(),
                          deck_file("[placement]\nactor = " + std::to_string(n - 1) +
                                    "\nreward = 1\n[dist]\ndevice = cpu\n"),
                          {"run.seed=9"}, deck_sections());
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->backend, Backend::mpi);
  EXPECT_EQ(rt->config.get<RunConfig>().seed, 9u);
  EXPECT_EQ(rt->groups->all().size(), 2u);
  expect_collectives_stay_inside(*rt->groups);
}

TEST(Runtime, RefusesAnImpossibleLayoutOnEveryRank) {
  int n = test::world().size();
  ::testing::internal::CaptureStderr();
  auto rt = start_runtime(test::world(),
                          deck_file("[placement]\nactor = " + std::to_string(n) + "\nreward = 1\n"), {}, deck_sections());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt, nullptr);  // on every rank: nobody went on to build groups
  if (test::world().rank() == 0) {
    EXPECT_NE(err.find("add up to " + std::to_string(n + 1) + " ranks, but the job has " +
                       std::to_string(n)), std::string::npos) << err;
  }
}

}  // namespace test_groups
