#include "quartet/commands/plan_command.hpp"

#include <iostream>

#include "quartet/core/check.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"
#include "quartet/shard/memory_plan.hpp"

namespace quartet {
namespace {

int positive_option(const CommandLine& cl, const std::string& name) {
  if (!cl.has(name)) return 0;
  const std::string& text = cl.options.at(name);
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1 || value > 1000000)
    throw UsageError("--" + name + " is '" + text + "': expected a number of ranks (>= 1)");
  return static_cast<int>(value);
}

}  // namespace

int plan_to(const CommandLine& cl, std::ostream& out, std::ostream& err) {
  const int ranks = positive_option(cl, "ranks");
  const int per_node = positive_option(cl, "ranks-per-node");
  const Config config = load_config(Deck(cl.operand, read_deck_file(cl.operand), cl.overrides, deck_schema()));
  int world = ranks;
  if (world == 0) {
    if (config.placement.mode == "colocated")
      throw UsageError("the deck's placement is colocated: every role spans every rank, so the "
                       "plan needs the job's size: pass --ranks N");
    for (int n : {config.placement.actor, config.placement.critic, config.placement.reference,
                  config.placement.reward})
      world += std::max(0, n);
    if (world == 0) config.deck.fail("placement.actor", "is not set: give the placement or pass --ranks N");
  }
  const MemoryPlan plan = make_memory_plan(config, world, per_node);
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
