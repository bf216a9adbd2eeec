#pragma once
// `quartet launch LAUNCHER ARGS...`: runs an MPI launcher (mpirun, mpiexec, srun) so that a
// stop signal sent to it is a clean stop, not a kill.
//
// Why: neither launcher passes SIGTERM on. Open MPI's mpirun answers it by aborting the job
// (SIGCONT to the ranks, odls_base_sigkill_timeout seconds later SIGTERM, as long again later
// SIGKILL, exit 1; it refuses SIGTERM in ess_base_forward_signals), and srun by killing every
// task at once. Both pass SIGUSR1 on, which quartet train takes as the same stop request.
//
// What it does: the launcher runs in a process group of its own, with /dev/null as its input,
// so a terminal's Ctrl-C or a scheduler's signal to the job's process group reaches this
// process alone. Each SIGTERM, SIGINT, SIGHUP or SIGUSR1 it receives becomes SIGUSR1 for the
// job: for the quartet processes among the launcher's descendants (the ranks on this host),
// and for the launcher itself when it is one that passes SIGUSR1 to every rank (srun; mpirun,
// mpiexec, orterun, prterun), since some builds of mpirun pass it to no rank. A rank that sees
// it is enough: train's ranks agree on the largest count of stop requests. First signal:
// checkpoint after the iteration, exit 75; second: stop at the next safe point, exit 76; a
// third ends the launcher (SIGTERM, its own abort) and a fourth kills its process group.
// Copies of one request less than a second apart count once (core/signals.hpp).
//
// Exit status: the launcher's (mpirun and srun return the ranks' 75 or 76), 128 + N when it
// was killed by signal N.
#include "quartet/core/cli.hpp"

namespace quartet {

int run_launch(const CommandLine& command_line);
// Blocks the signals run_launch takes (they wait, pending, until it takes them): called before
// LibTorch's initialisers run, so that a request in launch's first half-second is not a kill.
void block_launch_signals();

}  // namespace quartet
