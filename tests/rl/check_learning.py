"""Runs `quartet train` and checks that the mean reward rose: the mean of the last `window`
iterations must exceed the mean of the first `window` by at least `margin` (rewards in [0, 1]).

    check_learning.py --window 10 --margin 0.08 -- mpirun -np 3 quartet train DECK --set ...
"""
import argparse
import re
import subprocess
import sys

ITER = re.compile(r"^iter\s+(\d+)/(\d+) \| reward (-?[0-9.]+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--margin", type=float, required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [c for c in args.command if c != "--"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit(f"check_learning: quartet exited with {run.returncode}")
    rewards = [float(m.group(3)) for m in map(ITER.match, run.stdout.splitlines()) if m]
    if len(rewards) < 2 * args.window:
        sys.exit(f"check_learning: {len(rewards)} iteration lines, need at least {2 * args.window}")
    first = sum(rewards[: args.window]) / args.window
    last = sum(rewards[-args.window:]) / args.window
    print(f"check_learning: mean reward of the first {args.window} iterations {first:.3f}, "
          f"of the last {args.window} {last:.3f} (required rise {args.margin})")
    if last < first + args.margin:
        sys.exit("check_learning: the reward did not rise enough")


if __name__ == "__main__":
    main()
