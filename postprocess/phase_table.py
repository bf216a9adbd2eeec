#!/usr/bin/env python3
"""Where each run's iterations went: one row per run, for benchmarks of placements and GPU counts.

    python3 postprocess/phase_table.py RUN.h5 [RUN.h5 ...] [--skip 1] [--gpus N ...] [--markdown]

Columns: run, placement mode, ranks, GPUs, the iterations averaged, the mean time of each phase
(generate, score, advantages, train: the slowest rank's, from /timing, else the time_<phase>
metric), the mean iteration time (time_iteration: the iteration's wall time), the mean new
tokens/s, the peak device memory of any rank and phase (GiB) against the plan's largest, and the
scaling efficiency against the run with the fewest GPUs: t_base * gpus_base / (t * gpus).

--skip N leaves out the first N iterations (default 1: the warm-up, with its graph captures and
first allocations) when a run has more than N. --gpus gives each run's GPU count in order (a
disjoint run has more ranks than GPUs); without it a run counts one GPU per rank. --markdown
prints a Markdown table (for bench/README.md) instead of aligned columns.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402
import sweep_table  # noqa: E402

GIB = float(1 << 30)
HEADER = ["run", "placement", "ranks", "GPUs", "iterations", "generate s", "score s", "advantages s", "train s",
          "iteration s", "new tok/s", "peak GiB", "plan GiB", "scaling"]


def used_rows(run, skip):
    """Indices of the iterations to average: all but the first `skip`, when there are more."""
    n = len(run.iterations)
    return np.arange(skip, n) if n > skip else np.arange(n)


def phase_seconds(run, phase, rows):
    """Mean over `rows` of the slowest rank's time of `phase` (or of the time_<phase> metric)."""
    if len(rows) == 0:
        return None
    if phase in run.timing_phases():
        return float(run.timing(phase)[rows].max(axis=1).mean())
    if run.has_metric(f"time_{phase}"):
        return float(run.metric(f"time_{phase}")[rows].mean())
    return None


def metric_mean(run, name, rows):
    if len(rows) == 0 or not run.has_metric(name):
        return None
    values = run.metric(name)[rows]
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else None


def peak_gib(run, rows):
    peaks = [run.memory(p)[rows].max() for p in run.memory_phases() if len(rows)]
    return float(max(peaks)) / GIB if peaks else None


def build_rows(runs, gpus, skip):
    rows = []
    for run, n_gpus in zip(runs, gpus):
        used = used_rows(run, skip)
        plan = run.memory_plan()
        row = [run.name, run.deck().get("placement.mode"), run.world_size, n_gpus, len(used)]
        row += [phase_seconds(run, p, used) for p in quartet_run.PHASES]
        row += [metric_mean(run, "time_iteration", used), metric_mean(run, "tokens_per_s", used), peak_gib(run, used),
                float(np.max(plan)) / GIB if plan is not None and len(plan) else None, None]
        rows.append(row)
    # Scaling against the run with the fewest GPUs that has an iteration time.
    timed = [r for r in rows if r[9] is not None and r[9] > 0]
    if timed:
        base = min(timed, key=lambda r: r[3])
        for r in timed:
            r[13] = 100.0 * base[9] * base[3] / (r[9] * r[3])
    return rows


def _cell(value, column):
    if value is None:
        return "-"
    if column == "scaling":
        return f"{value:.0f}%"
    if isinstance(value, float):
        return f"{value:,.0f}" if column == "new tok/s" else f"{value:.2f}"
    return str(value)


def format_markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(v, c) for v, c in zip(row, header)) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="phase_table.py", description="Phase times, throughput, memory and "
                                     "scaling of runs, one row each.")
    parser.add_argument("runs", nargs="+", metavar="RUN.h5")
    parser.add_argument("--skip", type=int, default=1, metavar="N",
                        help="leave out the first N iterations when a run has more (default 1)")
    parser.add_argument("--gpus", type=int, nargs="+", metavar="N",
                        help="each run's GPU count, in order (default: one per rank)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    quartet_run.add_open_arguments(parser)
    args = parser.parse_args(argv)
    if args.skip < 0:
        parser.error("--skip must be 0 or more")
    if args.gpus is not None and (len(args.gpus) != len(args.runs) or min(args.gpus) < 1):
        parser.error(f"--gpus needs one positive count per run ({len(args.runs)}), got {len(args.gpus)}")
    runs = [quartet_run.open_run(p, retries=args.retries, wait=args.wait) for p in args.runs]
    gpus = args.gpus or [run.world_size for run in runs]
    rows = build_rows(runs, gpus, args.skip)
    if args.markdown:
        print(format_markdown(HEADER, rows))
    else:
        cells = [[_cell(v, c) if isinstance(v, float) or c == "scaling" else v for v, c in zip(row, HEADER)]
                 for row in rows]
        print(sweep_table.format_table(HEADER, cells))
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("phase_table.py", main))
