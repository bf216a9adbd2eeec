#pragma once
// `quartet inspect FILE`: a summary of a run file (run.h5). Checkpoints join when they exist.
#include "quartet/core/cli.hpp"

namespace quartet {

int run_inspect(const CommandLine& command_line);

}  // namespace quartet
