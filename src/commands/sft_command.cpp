#include "quartet/commands/sft_command.hpp"

#include "quartet/tune/sft.hpp"

namespace quartet {

// --time-limit reaches the deck as run.time_limit (the dispatcher adds it to the overrides).
int run_sft_command(Runtime& runtime, const CommandLine&) { return run_sft(runtime); }

}  // namespace quartet
