#include "quartet/commands/dpo_command.hpp"

#include "quartet/tune/dpo.hpp"

namespace quartet {

// --time-limit reaches the deck as run.time_limit (the dispatcher adds it to the overrides).
int run_dpo_command(Runtime& runtime, const CommandLine&) { return run_dpo(runtime); }

}  // namespace quartet
