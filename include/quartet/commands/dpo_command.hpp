#pragma once
// `quartet dpo DECK [--time-limit DURATION]`: Direct Preference Optimisation of the actor on the
// deck's [dpo] pairs against a frozen reference (tune/dpo.hpp); checkpoints, resumes by itself,
// stops cleanly on SIGUSR1/SIGTERM (exit 75), as train and sft do.
#include "quartet/core/cli.hpp"
#include "quartet/dist/runtime.hpp"

namespace quartet {

int run_dpo_command(Runtime& runtime, const CommandLine& command_line);

}  // namespace quartet
