#pragma once
// `quartet inspect PATH`: a summary of what PATH holds.
//   a run file (run.h5)              iterations, metrics, rollouts (run_file.hpp)
//   a checkpoint step_<N>/           iteration, models, optimizer state, verification
//   a checkpoints/ or run directory  every step (complete / incomplete / damaged), latest, and
//                                    the latest one in detail (a run directory's run.h5 first)
// Exit status 0 when what was inspected is intact, 1 when a checkpoint is damaged or there is
// no complete one (the output says which).
#include "quartet/core/cli.hpp"

namespace quartet {

int run_inspect(const CommandLine& command_line);

}  // namespace quartet
