#pragma once
// `quartet train DECK [--time-limit DURATION]`: RLHF training over the deck's model groups
// (rl/trainer.hpp); checkpoints, resumes by itself, stops cleanly on SIGUSR1/SIGTERM.
#include "quartet/core/cli.hpp"
#include "quartet/dist/runtime.hpp"

namespace quartet {

int run_train(Runtime& runtime, const CommandLine& command_line);

}  // namespace quartet
