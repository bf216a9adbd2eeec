"""What the end-to-end checks of the stage commands share (check_sft.py, check_rm.py,
check_dpo.py): a `mpirun ... quartet COMMAND DECK` run read line by line with a deadline, a run
file's series, a checkpoint's tensors, and "these two runs are the same, bitwise".

A check calls use(name, quartet, model) first: its messages' prefix, the quartet binary, and the
checkpoint file of the model it trains ("actor" or "reward").
"""
import os
import re
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from watched_run import WatchedRun, time_limited_rounds  # noqa: E402,F401 (time_limited_rounds: for the checks)

NAME, QUARTET, MODEL = "check", "quartet", "actor"
EXIT_RESUBMIT = 75
RUN_SECONDS = 200
STEP = re.compile(r"^step\s+(\d+)/(\d+) \|")
UNTIMED = lambda name: not name.startswith("time_") and name != "tokens_per_s"


def fail(msg):
    sys.exit(f"{NAME}: FAILED: {msg}")


def say(msg):
    print(f"{NAME}: {msg}", flush=True)


class Run(WatchedRun):
    """One `mpirun ... quartet COMMAND DECK` with its output collected line by line."""

    def __init__(self, launcher, np_, command, deck, sets):
        cmd = launcher + [str(np_), QUARTET, command, deck]
        for s in sets:
            cmd += ["--set", s]
        super().__init__(cmd, RUN_SECONDS, fail)

    def wait_for_step(self, n):
        self.wait_for(STEP, n, "step")


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
