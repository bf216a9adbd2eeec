#pragma once
// `quartet plan DECK [--set k=v ...] [--ranks N] [--ranks-per-node N]`: the memory plan of a
// deck (shard/memory_plan.hpp) as a table, without MPI and without GPU work. The world size is
// --ranks, else the sum of the disjoint placement's counts (colocated decks need --ranks).
// Exit status 0 when every rank fits; otherwise 1, with the roles that do not fit and the
// knobs that would make them fit.
#include <iosfwd>

#include "quartet/core/cli.hpp"

namespace quartet {

int run_plan(const CommandLine& cl);
// The same, on explicit streams (for tests).
int plan_to(const CommandLine& cl, std::ostream& out, std::ostream& err);

}  // namespace quartet
