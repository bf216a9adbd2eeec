#include "quartet/commands/train_command.hpp"

#include "quartet/rl/trainer.hpp"

namespace quartet {

// --time-limit reaches the deck as run.time_limit (the dispatcher adds it to the overrides).
int run_train(Runtime& runtime, const CommandLine&) { return train(runtime); }

}  // namespace quartet
