"""Runs `quartet train` and checks that the mean reward rose: the mean of the last `window`
iterations must exceed the mean of the first `window` by at least `margin` (rewards in [0, 1]).

    check_learning.py --window 10 --margin 0.08 -- mpirun -np 3 quartet train DECK --set ...

--drawn takes the reward of everything dynamic sampling drew (the log line's "drawn ... reward"),
not that of the groups it kept, which leaves out the groups already solved. --require COND (with
--run-h5 PATH) checks the run's metrics as check_metrics.py does, e.g. that an option acted.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ITER = re.compile(r"^iter\s+(\d+)/(\d+) \| reward (-?[0-9.]+)")
DRAWN = re.compile(r"^iter\s+\d+/\d+ \|.*\| drawn \d+ groups, .* rounds, reward (-?[0-9.]+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--margin", type=float, required=True)
    ap.add_argument("--drawn", action="store_true", help="the reward of every sample drawn (dynamic sampling)")
    ap.add_argument("--run-h5", help="the run file, for --require")
    ap.add_argument("--require", action="append", default=[], help="a condition on the run's metrics (check_metrics.py)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [c for c in args.command if c != "--"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit(f"check_learning: quartet exited with {run.returncode}")
    pattern, group = (DRAWN, 1) if args.drawn else (ITER, 3)
    rewards = [float(m.group(group)) for m in map(pattern.match, run.stdout.splitlines()) if m]
    if len(rewards) < 2 * args.window:
        sys.exit(f"check_learning: {len(rewards)} iteration lines, need at least {2 * args.window}")
    first = sum(rewards[: args.window]) / args.window
    last = sum(rewards[-args.window:]) / args.window
    print(f"check_learning: mean reward of the first {args.window} iterations {first:.3f}, "
          f"of the last {args.window} {last:.3f} (required rise {args.margin})")
    if last < first + args.margin:
        sys.exit("check_learning: the reward did not rise enough")
    if args.require:
        import check_metrics  # h5py, only where a condition asks for the run file
        if not args.run_h5 or not check_metrics.check_file(args.run_h5, args.require):
            sys.exit("check_learning: a condition on the run's metrics does not hold")


if __name__ == "__main__":
    main()
