#!/usr/bin/env python3
"""One row per run of a sweep: what differs between the runs, and how they ended.

    python3 postprocess/sweep_table.py runs/sweep_*/run.h5 [--csv OUT.csv] [--metric reward_mean ...]

Columns: run (the `name` attribute, else the run's directory), every deck key whose value is not
the same in all runs (run.out left out: it differs by construction and names the run already),
iterations complete, and per metric its final and best value (best = highest for rewards and
tokens_per_s, lowest otherwise). Default metrics: reward_mean and kl. Prints an aligned table;
--csv writes the same rows as CSV.
"""

import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402

DEFAULT_METRICS = ("reward_mean", "kl")
# Keys that differ between the runs of any sweep without being a parameter of it.
IGNORED_KEYS = ("run.out", "run.name")  # differ per run by construction (quartet sweep sets both)


def differing_keys(decks):
    """Deck keys, in first-seen order, whose value is not the same in every deck (a key absent
    from some decks differs too: the default applied there)."""
    keys = []
    for deck in decks:
        keys += [k for k in deck if k not in keys]
    return [k for k in keys if k not in IGNORED_KEYS and len({d.get(k) for d in decks}) > 1]


def final_value(values):
    """The last finite value (a NaN row is a metric the writer could not fill)."""
    for v in reversed(list(values)):
        if math.isfinite(v):
            return float(v)
    return None


def build_rows(runs, metrics):
    """(header, rows) with rows as lists of values (None where a run lacks a value)."""
    decks = [run.deck() for run in runs]
    keys = differing_keys(decks)
    header = ["run"] + keys + ["iterations"]
    for m in metrics:
        header += [f"{m} final", f"{m} best"]
    rows = []
    for run, deck in zip(runs, decks):
        row = [run.name] + [deck.get(k) for k in keys] + [len(run.iterations)]
        for m in metrics:
            if run.has_metric(m):
                values = run.metric(m)
                row += [final_value(values), quartet_run.best_value(m, values)]
            else:
                row += [None, None]
        rows.append(row)
    return header, rows


def _text(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def format_table(header, rows):
    """Aligned columns: text left, numbers right."""
    cells = [header] + [[_text(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(header))]
    lines = []
    for r, line in enumerate(cells):
        parts = [c.rjust(w) if numeric[i] and r else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(parts).rstrip())
        if r == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            writer.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sweep_table.py", description="A table of the runs of a sweep.")
    parser.add_argument("runs", nargs="+", metavar="RUN.h5")
    parser.add_argument("--csv", metavar="OUT.csv", help="also write the table as CSV")
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="metric to report (repeatable; default: reward_mean and kl)")
    quartet_run.add_open_arguments(parser)
    args = parser.parse_args(argv)
    metrics = args.metric or list(DEFAULT_METRICS)
    runs = [quartet_run.open_run(p, retries=args.retries, wait=args.wait) for p in args.runs]
    header, rows = build_rows(runs, metrics)
    print(format_table(header, rows))
    for m in metrics:
        lacking = [run.name for run in runs if not run.has_metric(m)]
        if lacking:
            print(f"note: no metric {m} in {', '.join(lacking)}", file=sys.stderr)
    if args.csv:
        write_csv(args.csv, header, rows)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("sweep_table.py", main))
