#pragma once
// `quartet plan DECK [--set k=v ...] [--ranks N] [--ranks-per-node N]`: the memory plan of a
// deck (shard/memory_plan.hpp) as a table, without MPI and without GPU work. The world size is
// --ranks, else the sum of the disjoint placement's counts (colocated decks need --ranks).
// Exit status 0 when every rank fits; otherwise 1, with the roles that do not fit and the
// knobs that would make them fit.
// With --ranks-needed it prints only the number of ranks the placement needs (the sum of the
// disjoint counts; for a colocated deck the count its roles give) and exits 0. A colocated deck
// that gives no count runs on any number of ranks: an error naming placement.mode (exit 1).
#include <iosfwd>

#include "quartet/core/cli.hpp"

namespace quartet {

int run_plan(const CommandLine& cl);
// The same, on explicit streams (for tests).
int plan_to(const CommandLine& cl, std::ostream& out, std::ostream& err);

}  // namespace quartet
