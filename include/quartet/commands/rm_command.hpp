#pragma once
// `quartet rm DECK [--time-limit DURATION]`: reward-model training on the deck's [rm] preference
// pairs (tune/rm.hpp); checkpoints, resumes by itself, stops cleanly on SIGUSR1/SIGTERM (exit
// 75), as train does.
#include "quartet/core/cli.hpp"
#include "quartet/dist/runtime.hpp"

namespace quartet {

int run_rm_command(Runtime& runtime, const CommandLine& command_line);

}  // namespace quartet
