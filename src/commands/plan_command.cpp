#include "quartet/commands/plan_command.hpp"

#include <algorithm>
#include <iostream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/check.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"
#include "quartet/core/units.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "quartet/tune/stage_plan.hpp"

namespace quartet {
namespace {

int positive_option(const CommandLine& cl, const std::string& name) {
  if (!cl.has(name)) return 0;
  const std::string& text = cl.options.at(name);
  size_t used = 0;
  const long long value = leading_integer(text, &used);
  if (used != text.size() || value < 1 || value > 1000000)
    throw UsageError("--" + name + " is '" + text + "': expected a number of ranks (>= 1)");
  return static_cast<int>(value);
}

int disjoint_ranks(const PlacementConfig& pl) {
  int world = 0;
  for (int n : {pl.actor, pl.critic, pl.reference, pl.reward}) world += std::max(0, n);
  return world;
}

// The ranks the placement fixes: the sum of the disjoint counts, or the count every role of a
// colocated deck spans. make_placement then refuses what train would refuse on that many.
int ranks_needed(const Config& config) {
  const PlacementConfig& pl = config.get<PlacementConfig>();
  const bool colocated = pl.mode == PlacementMode::colocated;
  const int world = colocated ? std::max({pl.actor, pl.critic, pl.reference, pl.reward}) : disjoint_ranks(pl);
  if (colocated && world < 1)
    config.deck.fail("placement.mode", "is colocated and no role gives a rank count: every role spans "
                                       "every rank, so the deck runs on any number of ranks; choose one "
                                       "(mpirun -np N), or give the counts");
  make_placement(pl, world, config.deck);
  return world;
}

}  // namespace

int plan_to(const CommandLine& cl, std::ostream& out, std::ostream& err) {
  const int ranks = positive_option(cl, "ranks");
  const int per_node = positive_option(cl, "ranks-per-node");
  if (cl.has("ranks-needed") && (ranks > 0 || per_node > 0))
    throw UsageError("--ranks-needed prints the ranks the deck's placement needs: it takes no --ranks "
                     "or --ranks-per-node");
  const Config config = load_config(Deck(cl.operand, read_deck_file(cl.operand), cl.overrides, deck_schema()));
  if (cl.has("ranks-needed")) {
    out << ranks_needed(config) << "\n";
    out.flush();
    return 0;
  }
  int world = ranks;
  if (world == 0) {
    if (config.get<PlacementConfig>().mode == PlacementMode::colocated)
      throw UsageError("the deck's placement is colocated: every role spans every rank, so the "
                       "plan needs the job's size: pass --ranks N");
    world = disjoint_ranks(config.get<PlacementConfig>());
    if (world == 0) config.deck.fail("placement.actor", "is not set: give the placement or pass --ranks N");
  }
  // A stage's deck (sft, rm) is planned with its own shapes (tune/stage_plan.hpp).
  const MemoryPlan plan = make_memory_plan(stage_plan_config(config), world, per_node);
  out << format_plan(plan);
  out.flush();
  const std::string problems = plan_problems(plan);
  if (problems.empty()) return 0;
  err << "\n" << problems;
  err.flush();
  return 1;
}

int run_plan(const CommandLine& cl) { return plan_to(cl, std::cout, std::cerr); }

}  // namespace quartet
