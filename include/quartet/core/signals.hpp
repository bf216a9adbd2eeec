#pragma once
// Stop requests from the batch system, GROMACS-style: the handlers of SIGUSR1 (Slurm's
// --signal=B:USR1@N warning before the time limit) and SIGTERM (scancel, preemption) only count
// the signal. The ranks look at the count at safe points and agree on it with one allreduce,
// because one rank may have been signalled and another not (or later):
//   first request   finish the iteration, write a checkpoint, exit kExitResubmit;
//   second request  stop at the next safe point (a phase boundary) without a new checkpoint,
//                   exit kExitStopped; the previous checkpoint stays the one to resume from.
namespace quartet {

// Exit statuses of `quartet train` that a batch script acts on (slurm/train.sbatch).
constexpr int kExitDone = 0;        // the run finished
constexpr int kExitError = 1;       // something failed (the message says what)
constexpr int kExitUsage = 2;       // the command line or the deck was refused
constexpr int kExitResubmit = 75;   // EX_TEMPFAIL: checkpointed and stopped (signal or time limit): requeue
constexpr int kExitStopped = 76;    // stopped on a second request, no new checkpoint: do not requeue

// SIGUSR1 and SIGTERM count into a flag (sigaction, SA_RESTART); copies of one request that
// arrive within a second of each other (scancel --full, forwarding shells) count once. Call
// once, early.
// Returns true when it replaced another handler: a library that started since (MPI's runtime,
// CUDA, NCCL, UCX) had installed its own, which is why train installs them again once
// everything is up.
bool install_stop_handlers();
// Signals received by this process so far.
int stop_requests();
// The name of the first signal received ("SIGUSR1", "SIGTERM"), or "" when none.
const char* first_stop_signal();

}  // namespace quartet
