#pragma once
// The RLHF loop of `quartet train DECK`. One iteration, disjoint placement (DESIGN.md):
//   generate   actor ranks draw prompts, gather the actor's full weights once (hybrid engine),
//              sample completions with the KV cache, and record their own log-probs;
//   score      rollouts go over MPI to the reference (log-probs), reward (scores) and critic
//              (values) groups, which work concurrently and send results back; a rule reward
//              is scored on the actor ranks;
//   advantages KL-shaped rewards, GAE / REINFORCE++ / GRPO / RLOO, whitened over the actor group;
//              returns go to the critic;
//   train      actor and critic update at the same time on their own groups;
//   eval       when [eval] asks (every eval.every iterations, after the last, before the first),
//              the actor ranks generate on held-out prompts and the run's reward scores them
//              (rl/evaluator.hpp); an `eval` line follows the iteration's.
// Colocated placement runs the same phases on every rank in turn, parking the models a phase
// does not use in host memory. Rank 0 prints one line per iteration.
#include "quartet/dist/runtime.hpp"

namespace quartet {

// The whole run of the runtime's deck; the exit status (0, or kExitResubmit / kExitStopped when
// stopped early, 2 for a deck refused before any model was built).
int train(Runtime& runtime);

}  // namespace quartet
