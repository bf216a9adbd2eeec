#!/usr/bin/env python3
"""Two quartet runs side by side.

    python3 postprocess/compare_runs.py RUN_A.h5 RUN_B.h5 [--metric NAME ...] [--png OUT.png]
    python3 postprocess/compare_runs.py RUN_A.h5 RUN_B.h5 --identical

Prints, for each metric both runs have (or the --metric ones), the final value, the best value
(highest for rewards and tokens_per_s, lowest otherwise) and the mean of the last 10 iterations of
each run; and writes a PNG overlaying the two reward_mean curves (with +-reward_std bands when
present). The PNG defaults to compare_<A>_vs_<B>.png in the current directory.

--identical answers "did a change alter the numbers?": the two runs must have the same metrics
over the same iterations, bitwise equal, apart from the wall-clock ones (time_*, tokens_per_s);
exit 0 when they are, 1 naming the first difference.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402
from sweep_table import final_value, format_table  # noqa: E402

LAST = 10  # the "mean of the last N" window: smooths the noise of single-iteration values


def mean_of_last(values, n=LAST):
    values = np.asarray(values, dtype=np.float64)[-n:]
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else None


def compare_rows(run_a, run_b, metrics):
    """(header, rows): one row per metric, None where a run lacks it."""
    header = ["metric", "A final", "B final", "A best", "B best", f"A last{LAST}", f"B last{LAST}"]
    rows = []
    for m in metrics:
        stats = []
        for run in (run_a, run_b):
            if run.has_metric(m):
                v = run.metric(m)
                stats.append((final_value(v), quartet_run.best_value(m, v), mean_of_last(v)))
            else:
                stats.append((None, None, None))
        (fa, ba, la), (fb, bb, lb) = stats
        rows.append([m, fa, fb, ba, bb, la, lb])
    return header, rows


def plot_rewards(run_a, run_b, path, metric="reward_mean"):
    """Overlay the two runs' `metric` curves; returns False (nothing written) when neither has it."""
    runs = [r for r in (run_a, run_b) if r.has_metric(metric)]
    if not runs:
        return False
    fig, ax = quartet_run.pyplot().subplots(figsize=(7, 4))
    for color, label, run in (("C0", f"A: {run_a.name}", run_a), ("C1", f"B: {run_b.name}", run_b)):
        if not run.has_metric(metric):
            continue
        y = run.metric(metric)
        ax.plot(run.iterations, y, color=color, label=label)
        if metric == "reward_mean" and run.has_metric("reward_std"):
            std = run.metric("reward_std")
            ax.fill_between(run.iterations, y - std, y + std, color=color, alpha=0.15)
    ax.set_xlabel("iteration")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: {run_a.name} vs {run_b.name}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    quartet_run.pyplot().close(fig)
    return True


def is_timing(name):
    """Metrics that measure the clock: two runs of the same numbers differ in these."""
    return name.startswith("time_") or name == "tokens_per_s"


def first_difference(run_a, run_b):
    """None when the runs' untimed metrics are bitwise equal over the same iterations, else why not."""
    names_a = {m for m in run_a.metric_names() if not is_timing(m)}
    names_b = {m for m in run_b.metric_names() if not is_timing(m)}
    if names_a != names_b:
        return f"different metrics: only in A {sorted(names_a - names_b)}, only in B {sorted(names_b - names_a)}"
    if not np.array_equal(run_a.iterations, run_b.iterations):
        return f"different iterations: {len(run_a.iterations)} in A, {len(run_b.iterations)} in B"
    for m in sorted(names_a):
        a, b = run_a.metric(m), run_b.metric(m)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if not same.all():
            i = int(np.nonzero(~same)[0][0])
            return f"{m} differs first at iteration {run_a.iterations[i]}: {a[i]!r} vs {b[i]!r}"
    return None


def _safe(name):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="compare_runs.py", description="Compare two quartet runs.")
    parser.add_argument("run_a", metavar="RUN_A.h5")
    parser.add_argument("run_b", metavar="RUN_B.h5")
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="metric to compare (repeatable; default: every metric both runs have)")
    parser.add_argument("--png", metavar="OUT.png", help="reward overlay (default: compare_<A>_vs_<B>.png here)")
    parser.add_argument("--identical", action="store_true",
                        help="only check that every metric but the timings is bitwise equal (exit 1 if not)")
    quartet_run.add_open_arguments(parser)
    args = parser.parse_args(argv)
    run_a = quartet_run.open_run(args.run_a, retries=args.retries, wait=args.wait)
    run_b = quartet_run.open_run(args.run_b, retries=args.retries, wait=args.wait)
    if args.identical:
        why = first_difference(run_a, run_b)
        if why:
            print(f"not identical: {why}")
            return 1
        untimed = [m for m in run_a.metric_names() if not is_timing(m)]
        print(f"identical: {len(untimed)} metrics over {len(run_a.iterations)} iterations, bitwise "
              f"(timings left out: {', '.join(m for m in run_a.metric_names() if is_timing(m)) or 'none'})")
        return 0

    print(f"A: {run_a.path} ({run_a.name}, {len(run_a.iterations)} iterations complete)")
    print(f"B: {run_b.path} ({run_b.name}, {len(run_b.iterations)} iterations complete)")
    metrics = args.metric or sorted(set(run_a.metric_names()) & set(run_b.metric_names()))
    if metrics:
        header, rows = compare_rows(run_a, run_b, metrics)
        print(format_table(header, rows))
    else:
        print("note: the runs share no metric")
    only = sorted(set(run_a.metric_names()) ^ set(run_b.metric_names()))
    if only and not args.metric:
        print(f"note: in one run only: {', '.join(only)}")

    png = args.png or f"compare_{_safe(run_a.name)}_vs_{_safe(run_b.name)}.png"
    if plot_rewards(run_a, run_b, png):
        print(f"wrote {png}")
    else:
        print("note: reward plot skipped: neither run has reward_mean")
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("compare_runs.py", main))
