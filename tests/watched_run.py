"""One `mpirun ... quartet ...` job watched from a test: its output read line by line as it comes
(through a queue, so that a job that stops printing is noticed), a deadline past which it counts
as hung (killed, with its last output and, where gdb exists, its ranks' stacks), and its rank
processes for signals. Shared by tests/rl/check_resume.py and tests/tune/stage_check.py.
"""
import os
import re
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time


class WatchedRun:
    """cmd: the whole command line. seconds: the deadline. fail(msg): ends the check (it must not
    return). The job gets a session of its own: a signal to its process group is what a
    terminal's Ctrl-C sends."""

    def __init__(self, cmd, seconds, fail):
        self.cmd, self.seconds, self.fail = cmd, seconds, fail
        self.lines = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True)
        self.queue = queue.Queue()
        self.deadline = time.monotonic() + seconds
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def lines_as_they_come(self):
        """The job's output lines as they come, echoed; a job past its deadline is a hang."""
        while True:
            try:
                line = self.queue.get(timeout=max(0.1, self.deadline - time.monotonic()))
            except queue.Empty:
                self._hung()
            if line is None:
                return
            self.lines.append(line)
            sys.stdout.write(line)
            yield line

    def _hung(self):
        """Every rank's stacks (gdb, where there is one), then the whole job killed, then fail."""
        stacks = ""
        if shutil.which("gdb"):
            for pid in self.ranks():
                p = subprocess.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt 12"],
                                   capture_output=True, text=True, timeout=60)
                stacks += f"--- rank process {pid}:\n" + "\n".join(
                    ln for ln in p.stdout.splitlines() if ln.startswith(("#", "Thread"))) + "\n"
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.fail(f"{' '.join(self.cmd)} still ran after {self.seconds} s; its last output:\n"
                  f"{''.join(self.lines[-30:])}" + (f"\nits ranks' stacks:\n{stacks}" if stacks else ""))

    def wait_for(self, pattern, n, what):
        """Reads output until a line matching `pattern` (a compiled regex whose group 1 counts)
        reports n or more; `what` names the count in the failure ("iteration", "step")."""
        for line in self.lines_as_they_come():
            m = pattern.match(line)
            if m and int(m.group(1)) >= n:
                return
        self.fail(f"the run ended before {what} {n}:\n{''.join(self.lines[-20:])}")

    def finish(self):
        for _ in self.lines_as_they_come():
            pass
        self.proc.wait(timeout=60)
        return self.proc.returncode

    def output(self):
        return "".join(self.lines)

    def ranks(self):
        """The pids of the processes mpirun started (its children)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def time_limited_rounds(start, out, done, reference_output, fail, max_rounds, attempts=3):
    """Runs start(limit) (a WatchedRun of the job writing to `out`) round after round until one
    exits 0; every other round must exit 75 with a time-limit checkpoint. The limit is half the
    uninterrupted run's own time (`done`: a regex whose group 1 is the seconds it reports), as
    machines differ several-fold. A host less loaded than during the reference run can finish
    the whole run inside that budget; then the run starts over with half of its own time, so a
    pass always means at least two rounds. Returns (limit, rounds)."""
    m = re.search(done, reference_output, re.M)
    limit = float(m.group(1)) / 2 if m else 1.5
    for _ in range(attempts):
        shutil.rmtree(out, ignore_errors=True)
        rounds = 0
        while True:
            rounds += 1
            t0 = time.time()
            run = start(limit)
            rc = run.finish()
            if rc == 0:
                break
            if rc != 75 or "(time limit)" not in run.output():
                fail(f"round {rounds} exited {rc} without a time-limit checkpoint:\n{run.output()[-3000:]}")
            print(f"round {rounds} stopped by its time limit after {time.time() - t0:.1f}s "
                  f"(limit {limit:.2f}s + start-up)", flush=True)
            if rounds > max_rounds:
                fail(f"the run did not finish in {max_rounds} rounds (each must do at least one step)")
        if rounds >= 2:
            return limit, rounds
        m = re.search(done, run.output(), re.M)
        if not m:
            fail(f"the time-limited run finished in one round without reporting its time:\n{run.output()[-3000:]}")
        print(f"the whole run fit in its {limit:.2f}s budget; again with half its own {m.group(1)}s", flush=True)
        limit = float(m.group(1)) / 2
    fail(f"the time limit never stopped the run in {attempts} attempts")
