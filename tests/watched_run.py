"""One `mpirun ... quartet ...` job watched from a test: its output read line by line as it comes
(through a queue, so that a job that stops printing is noticed), a deadline past which it counts
as hung (killed, with its last output and, where gdb exists, its ranks' stacks), and its rank
processes for signals. Shared by tests/rl/check_resume.py and tests/tune/stage_check.py.
"""
import os
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
