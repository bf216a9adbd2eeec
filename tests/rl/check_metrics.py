"""Runs `quartet train` and checks conditions on the metrics it stored in run.h5.

    check_metrics.py --run-h5 RUN_H5 --require 'approx_kl[1] < 1e-9' --require 'grad_norm_actor == 0' \
        -- mpirun -np 2 quartet train DECK --set ...

A condition is METRIC[ITERATION] OP VALUE (ITERATION counts from 1), METRIC OP VALUE (every
iteration) or max(METRIC) / min(METRIC) / mean(METRIC) OP VALUE (over the run), with OP one of
< <= == >= > !=. The run must end with "train: done"; the log is printed, so that a failure shows
what happened. check_learning.py takes the same conditions.
"""
import argparse
import re
import subprocess
import sys

import h5py
import numpy as np

CONDITION = re.compile(r"^\s*(?:(max|min|mean)\(\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(\d+)\])?\s*\)?\s*"
                       r"(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
REDUCE = {"max": np.max, "min": np.min, "mean": np.mean}
OPS = {"<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal, ">=": np.greater_equal,
       ">": np.greater}


def check(metrics, condition):
    """Whether `condition` holds on run.h5's /metrics group; prints what it saw."""
    m = CONDITION.match(condition)
    if not m:
        sys.exit(f"check_metrics: cannot read the condition '{condition}'")
    reduce, name, iteration, op, value = m.group(1), m.group(2), m.group(3), m.group(4), float(m.group(5))
    if name not in metrics:
        sys.exit(f"check_metrics: run.h5 has no metric '{name}' (it has: {', '.join(sorted(metrics))})")
    values = np.asarray(metrics[name][()], dtype=np.float64)
    where = "every iteration"
    if iteration is not None:
        i = int(iteration)
        if not 1 <= i <= values.size:
            sys.exit(f"check_metrics: '{name}' has {values.size} iterations, not {i}")
        values, where = values[i - 1:i], f"iteration {i}"
    if reduce:
        values, where = np.asarray([REDUCE[reduce](values)]), f"{reduce} over the run"
    ok = OPS[op](values, value)
    print(f"check_metrics: {name} ({where}) {op} {value:g}: {'yes' if ok.all() else 'NO'}; values {values.tolist()}")
    return bool(ok.all())


def check_file(run_h5, conditions):
    """Whether every condition holds on the run file."""
    with h5py.File(run_h5, "r") as f:
        return all([check(f["metrics"], c) for c in conditions])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-h5", required=True, help="the run file the command writes")
    ap.add_argument("--require", action="append", default=[])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [c for c in args.command if c != "--"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0 or "train: done" not in run.stdout:
        sys.exit(f"check_metrics: quartet exited with {run.returncode}")
    if not check_file(args.run_h5, args.require):
        sys.exit("check_metrics: a condition does not hold")


if __name__ == "__main__":
    main()
