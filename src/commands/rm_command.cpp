#include "quartet/commands/rm_command.hpp"

#include "quartet/tune/rm.hpp"

namespace quartet {

// --time-limit reaches the deck as run.time_limit (the dispatcher adds it to the overrides).
int run_rm_command(Runtime& runtime, const CommandLine&) { return run_rm(runtime); }

}  // namespace quartet
