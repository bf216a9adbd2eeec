"""Stops one rank of `quartet train` (SIGSTOP) at chosen moments and checks that the watchdog
ends the job: within the timeout and a margin, non-zero, with a report that names the operation
and the stopped rank as the one waited for. The moments: while a checkpoint is being written
(its step directory has just appeared), right after an iteration's line, and a rank's own
moment a little later. Each rank is stopped in some trial. The trials run two at a time: each
spends most of its time waiting for the watchdog.

    check_watchdog_stall.py WORKDIR -- MPIRUN... -np QUARTET
The deck is inputs/demo.deck (run from the repository root).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

TIMEOUT = 4  # dist.watchdog_timeout of these runs, seconds
# From the stop to the end of mpirun: the timeout, the watchdog's roll call (2 s), Open MPI's
# kill sequence and room for a loaded CI host (two trials at a time).
MARGIN = 20
ITER = re.compile(r"^iter\s+(\d+)/(\d+) \|")


class TrialFailed(Exception):
    pass


def fail(msg):
    raise TrialFailed(msg)


def world_rank_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                return int(item.split(b"=", 1)[1])
    return None


def rank_pids(mpirun_pid):
    out = subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout
    pids = {}
    for p in out.split():
        r = world_rank_of(int(p))
        if r is not None:
            pids[r] = int(p)
    return pids


def trial(launcher, quartet, work, name, rank, moment):
    out = os.path.join(work, name)
    cmd = launcher + ["3", quartet, "train", "inputs/demo.deck", "--set", f"run.out={out}",
                      "--set", "run.iterations=400", "--set", f"dist.watchdog_timeout={TIMEOUT}",
                      "--set", "checkpoint.every=3", "--set", "checkpoint.keep=2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    seen_iteration = threading.Event()
    last_iteration = [0]

    def read():
        for line in proc.stdout:
            lines.append(line)
            m = ITER.match(line)
            if m:
                last_iteration[0] = int(m.group(1))
                seen_iteration.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped_pid = None
    try:
        deadline = time.time() + 120
        if moment == "checkpoint":
            # The step directory appears when the ranks begin writing it; stop at once.
            target = os.path.join(out, "checkpoints", "step_6")
            while not os.path.isdir(target):
                if proc.poll() is not None or time.time() > deadline:
                    fail(f"{name}: the run never began checkpoint step_6:\n{''.join(lines[-30:])}")
                time.sleep(0.001)
        else:
            wanted = 4 if moment == "iteration" else 5
            while last_iteration[0] < wanted:
                if proc.poll() is not None or time.time() > deadline:
                    fail(f"{name}: the run never reached iteration {wanted}:\n{''.join(lines[-30:])}")
                time.sleep(0.001)
            if moment == "later":
                time.sleep(0.15 + 0.1 * rank)
        pids = rank_pids(proc.pid)
        if rank not in pids:
            fail(f"{name}: no process of world rank {rank} under mpirun ({pids})")
        stopped_pid = pids[rank]
        os.kill(stopped_pid, signal.SIGSTOP)
        stop_time = time.time()
        try:
            rc = proc.wait(timeout=TIMEOUT + MARGIN)
        except subprocess.TimeoutExpired:
            fail(f"{name}: world rank {rank} stopped ({moment}): the job still runs {TIMEOUT + MARGIN} s later "
                 f"(dist.watchdog_timeout = {TIMEOUT}):\n{''.join(lines[-30:])}")
        took = time.time() - stop_time
        reader.join(timeout=10)
        text = "".join(lines)
        if rc == 0:
            fail(f"{name}: the job exited 0 with a rank stopped:\n{text[-3000:]}")
        reports = [l for l in lines if "watchdog: rank" in l]
        if not reports:
            fail(f"{name}: no watchdog report:\n{text[-3000:]}")
        named = [l for l in reports if re.search(rf"has not finished after .*world rank {rank}\b", l)]
        if not named:
            fail(f"{name}: the watchdog's report does not name world rank {rank} as the one waited for:\n"
                 + "".join(reports))
        return (f"check_watchdog_stall: {name}: world rank {rank} stopped ({moment}, after iteration "
                f"{last_iteration[0]}); the job ended {took:.1f} s later, exit {rc}:\n  {named[0].strip()}")
    finally:
        if proc.poll() is None:
            for pid in rank_pids(proc.pid).values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.kill()
            proc.wait()
        if stopped_pid:
            try:
                os.kill(stopped_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main():
    args = sys.argv[1:]
    split = args.index("--")
    (work,) = args[:split]
    command = args[split + 1:]
    launcher, quartet = command[:-1], command[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trials = [("checkpoint_rank1", 1, "checkpoint"), ("checkpoint_rank2", 2, "checkpoint"),
              ("checkpoint_rank0", 0, "checkpoint"), ("iteration_rank2", 2, "iteration"),
              ("iteration_rank1", 1, "iteration"), ("later_rank0", 0, "later")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(trial, launcher, quartet, work, name, rank, moment) for name, rank, moment in trials]
    failed = []
    for run in runs:
        try:
            print(run.result())
        except TrialFailed as e:
            failed.append(str(e))
    if failed:
        sys.exit("check_watchdog_stall: " + "\ncheck_watchdog_stall: ".join(failed))


if __name__ == "__main__":
    main()
