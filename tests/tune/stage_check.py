"""What the end-to-end checks of the stage commands share (check_sft.py, check_rm.py,
check_dpo.py): a `mpirun ... quartet COMMAND DECK` run read line by line with a deadline, a run
file's series, a checkpoint's tensors, and "these two runs are the same, bitwise".

A check calls use(name, quartet, model) first: its messages' prefix, the quartet binary, and the
checkpoint file of the model it trains ("actor" or "reward").
"""
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

NAME, QUARTET, MODEL = "check", "quartet", "actor"
EXIT_RESUBMIT = 75
RUN_SECONDS = 200
STEP = re.compile(r"^step\s+(\d+)/(\d+) \|")
UNTIMED = lambda name: not name.startswith("time_") and name != "tokens_per_s"


def fail(msg):
    sys.exit(f"{NAME}: FAILED: {msg}")


def say(msg):
    print(f"{NAME}: {msg}", flush=True)


class Run:
    """One `mpirun ... quartet COMMAND DECK` with its output collected line by line."""

    def __init__(self, launcher, np_, command, deck, sets):
        self.cmd = launcher + [str(np_), QUARTET, command, deck]
        for s in sets:
            self.cmd += ["--set", s]
        self.lines = []
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True)
        self.queue = queue.Queue()
        self.deadline = time.monotonic() + RUN_SECONDS
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def _lines(self):
        while True:
            try:
                line = self.queue.get(timeout=max(0.1, self.deadline - time.monotonic()))
            except queue.Empty:
                os.killpg(self.proc.pid, signal.SIGKILL)
                fail(f"{' '.join(self.cmd)} still ran after {RUN_SECONDS} s:\n{''.join(self.lines[-30:])}")
            if line is None:
                return
            self.lines.append(line)
            sys.stdout.write(line)
            yield line

    def wait_for_step(self, n):
        for line in self._lines():
            m = STEP.match(line)
            if m and int(m.group(1)) >= n:
                return
        fail(f"the run ended before step {n}:\n{''.join(self.lines[-20:])}")

    def finish(self):
        for _ in self._lines():
            pass
        self.proc.wait(timeout=60)
        return self.proc.returncode

    def output(self):
        return "".join(self.lines)

    def ranks(self):
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def use(name, quartet, model):
    global NAME, QUARTET, MODEL
    NAME, QUARTET, MODEL = name, quartet, model


def stage(command, deck, launcher, np_, out, *sets):
    return Run(launcher, np_, command, deck, [f"run.out={out}", "dist.watchdog_timeout=60"] + list(sets))


def run_to_end(run, expect=0):
    rc = run.finish()
    if rc != expect:
        fail(f"{' '.join(run.cmd)} exited {rc}, expected {expect}:\n{run.output()[-3000:]}")
    return run.output()


def series(out):
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        n = int(f.attrs["iterations_complete"])
        s = {k: np.asarray(f["metrics"][k][:n]) for k in f["metrics"] if UNTIMED(k)}
        for k in f.get("eval", {}):
            s[f"eval/{k}"] = np.asarray(f["eval"][k][()])
        return n, s


def final_state(out, step):
    state = {}
    with h5py.File(os.path.join(out, "checkpoints", f"step_{step}", f"{MODEL}.h5"), "r") as f:
        f.visititems(lambda k, v: state.__setitem__(k, np.asarray(v[()])) if isinstance(v, h5py.Dataset) else None)
    return state


def same_run(reference, other, steps, what):
    n_ref, m_ref = series(reference)
    n_oth, m_oth = series(other)
    if n_ref != steps or n_oth != steps:
        fail(f"{what}: run files hold {n_ref} and {n_oth} steps, expected {steps}")
    if sorted(m_ref) != sorted(m_oth):
        fail(f"{what}: different series: {sorted(m_ref)} vs {sorted(m_oth)}")
    for k in m_ref:
        if m_ref[k].shape != m_oth[k].shape or not np.array_equal(m_ref[k], m_oth[k]):
            fail(f"{what}: {k} differs: {m_ref[k]} vs {m_oth[k]}")
    a, b = final_state(reference, steps), final_state(other, steps)
    if sorted(a) != sorted(b) or any(a[k].tobytes() != b[k].tobytes() for k in a):
        fail(f"{what}: the final checkpoints differ")
    say(f"{what}: {len(m_ref)} series over {steps} steps and {len(a)} checkpoint tensors bitwise equal")
