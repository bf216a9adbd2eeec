#pragma once
// `quartet sft DECK [--time-limit DURATION]`: supervised fine-tuning of the actor on the deck's
// [sft] demonstrations (tune/sft.hpp); checkpoints, resumes by itself, stops cleanly on
// SIGUSR1/SIGTERM (exit 75), as train does.
#include "quartet/core/cli.hpp"
#include "quartet/dist/runtime.hpp"

namespace quartet {

int run_sft_command(Runtime& runtime, const CommandLine& command_line);

}  // namespace quartet
