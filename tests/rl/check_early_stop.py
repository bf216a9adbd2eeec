"""The first seconds of a job: a stop request at any moment ends it cleanly, and a rank that never
gets through MPI's start-up ends it, named, within dist.startup_timeout.

    python check_early_stop.py WORK -- MPIRUN_WORDS... QUARTET

  launch   SIGUSR1 to `quartet launch mpirun ... train` at moments from the first it can take one
           (SIGUSR1 blocked, /proc/PID/status) to the first iterations: exit 75 each time (the
           ranks may still be loading LibTorch, or not started yet), the run file absent or
           readable, and the job resubmitted runs to the end
  ranks    SIGUSR1 to every rank the moment it has its handler, before LibTorch's initialisers
           (as srun relays Slurm's warning): exit 75, not 138 (SIGUSR1's default action)
  stalled  one rank stopped (SIGSTOP) while it loads: the others give up on MPI's start-up
           after dist.startup_timeout (5 s here), saying so, and the job ends: no rank is left
"""
import os
import re
import shutil
import signal
import sys
import time

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from watched_run import WatchedRun  # noqa: E402

EXIT_RESUBMIT = 75
RUN_SECONDS = 90
DECK = ["inputs/demo.deck", "--set", "run.iterations=16", "--set", "dist.watchdog_timeout=30"]


def fail(msg):
    sys.exit(f"check_early_stop: {msg}")


def wait_for_ranks(run, n):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = run.ranks()
        if len(pids) >= n:
            return pids
        if run.proc.poll() is not None:
            fail(f"the job ended ({run.proc.returncode}) before its {n} ranks started")
        time.sleep(0.002)
    fail(f"mpirun did not start {n} ranks in 30 s")


def signal_mask(pid, field):
    """The set of signals in /proc/PID/status's `field` (SigBlk: blocked, SigCgt: caught)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                bits = int(line.split()[1], 16)
                return {n for n in range(1, 65) if bits >> (n - 1) & 1}
    return set()


def wait_until_taken(pid, field, run):
    """Until process pid blocks or catches SIGUSR1: the earliest moment quartet can take it (its
    .preinit_array, before LibTorch's initialisers; the dynamic loader's mapping comes before)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if signal.SIGUSR1 in signal_mask(pid, field):
                return
        except FileNotFoundError:
            pass
        if run.proc.poll() is not None:
            fail(f"the job ended ({run.proc.returncode}) before process {pid} took SIGUSR1")
        time.sleep(0.001)
    fail(f"process {pid} did not take SIGUSR1 ({field}) in 30 s")


def run_file_readable(out_dir, case):
    path = os.path.join(out_dir, "run.h5")
    if not os.path.exists(path):
        return "no run.h5 yet"
    try:
        with h5py.File(path, "r") as f:
            return f"run.h5 readable, {int(f.attrs['iterations_complete'])} iterations complete"
    except Exception as e:  # noqa: BLE001 (any failure to read is the finding)
        fail(f"{case}: {path} cannot be read: {e}")


def start(cmd, case):
    """The job, watched: one still running after RUN_SECONDS is a hang (killed, the case failed)."""
    return WatchedRun(cmd, RUN_SECONDS, lambda msg: fail(f"{case}: {msg}"))


def finish(run):
    return run.finish(), run.output()


def main():
    sep = sys.argv.index("--")
    work = os.path.abspath(sys.argv[1])
    mpirun, quartet = sys.argv[sep + 1:-1], sys.argv[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def train(out, *sets):
        cmd = mpirun + ["3", quartet, "train"] + DECK + ["--set", f"run.out={out}"]
        for s in sets:
            cmd += ["--set", s]
        return cmd

    # launch: a request to the launcher at any moment, the ranks loading or not yet there. The
    # first the moment launch has blocked the signal (before LibTorch's initialisers), the others
    # after fixed delays.
    for delay in (None, 0.15, 0.4, 0.8, 1.3):
        when = "the moment it blocks SIGUSR1" if delay is None else f"{delay:.2f} s after its start"
        case = f"SIGUSR1 to quartet launch {when}"
        out = os.path.join(work, f"launch_{delay or 0:.2f}")
        p = start([quartet, "launch"] + train(out), case)
        if delay is None:
            wait_until_taken(p.proc.pid, "SigBlk", p)
        else:
            time.sleep(delay)
        p.proc.send_signal(signal.SIGUSR1)
        rc, text = finish(p)
        if rc != EXIT_RESUBMIT:
            fail(f"{case}: exit {rc}, expected {EXIT_RESUBMIT}:\n{text[-3000:]}")
        state = run_file_readable(out, case)
        print(f"  {case}: exit {rc}, {state}", flush=True)
    # The last of them, resubmitted, runs to the end.
    rc, text = finish(start(train(out), "the resubmitted job"))
    if rc != 0 or "train: done in" not in text:
        fail(f"the job resubmitted after an early stop: exit {rc}:\n{text[-3000:]}")
    print(f"  resubmitted after the early stop: exit 0, {run_file_readable(out, 'resubmitted')}", flush=True)

    # ranks: the moment they exist, before main (LibTorch's initialisers take about half a second).
    case = "SIGUSR1 to every rank the moment it has its handler"
    out = os.path.join(work, "ranks")
    p = start(train(out), case)
    pids = wait_for_ranks(p, 3)
    for pid in pids:
        wait_until_taken(pid, "SigCgt", p)
        os.kill(pid, signal.SIGUSR1)
    rc, text = finish(p)
    if rc != EXIT_RESUBMIT:
        fail(f"{case}: exit {rc}, expected {EXIT_RESUBMIT} (138 is SIGUSR1's default action):\n{text[-3000:]}")
    print(f"  {case}: exit {rc}, {run_file_readable(out, case)}", flush=True)

    # stalled: a rank stopped before MPI_Init; the others wait there until dist.startup_timeout.
    # It is stopped once it runs quartet (its handler is there, LibTorch still loading): a child
    # stopped between mpirun's fork and its exec would stall mpirun itself, which no rank can end.
    case = "one rank stopped while it loads, before MPI_Init"
    p = start(train(os.path.join(work, "stalled"), "dist.startup_timeout=5"), case)
    pids = wait_for_ranks(p, 3)
    wait_until_taken(pids[-1], "SigCgt", p)
    os.kill(pids[-1], signal.SIGSTOP)
    t0 = time.monotonic()
    rc, text = finish(p)
    took = time.monotonic() - t0
    if rc == 0:
        fail(f"{case}: exit 0:\n{text[-3000:]}")
    if not re.search(r"MPI start-up .* did not finish in 5 s \(dist\.startup_timeout\)", text):
        fail(f"{case}: no word of the start-up that did not finish:\n{text[-3000:]}")
    try:
        os.kill(pids[-1], 0)
        alive = open(f"/proc/{pids[-1]}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    if alive:
        os.kill(pids[-1], signal.SIGKILL)
        fail(f"{case}: the stopped rank {pids[-1]} was left behind")
    print(f"  {case}: exit {rc} after {took:.1f} s, the others saying: "
          f"{next(ln for ln in text.splitlines() if 'did not finish' in ln)[:160]}", flush=True)
    print("check_early_stop: every early stop ended cleanly, and the stalled start-up ended the job")


if __name__ == "__main__":
    main()
