#include "quartet/dist/rank_local.hpp"

#include <mpi.h>

#include <cstdlib>

#include "quartet/core/log.hpp"

namespace quartet {

namespace {
thread_local int g_depth = 0;
}  // namespace

RankLocalStep::RankLocalStep() { ++g_depth; }
RankLocalStep::~RankLocalStep() { --g_depth; }
bool RankLocalStep::active() { return g_depth > 0; }

void check_not_rank_local(const std::string& collective) {
  if (!RankLocalStep::active()) return;
  eprintf_rank("quartet: internal error: %s was begun inside a rank-local step (World::agree), where a rank "
               "that fails leaves the others waiting in it; it belongs after the agreement\n",
               collective.c_str());
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace quartet
