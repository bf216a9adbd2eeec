"""Several rewards at once, end to end: `quartet train` runs with reward.terms and
reward.weights; every iteration's logged terms must combine to the total, in run.h5
(reward_mean against the weighted sum of the /metrics/reward.<name> series, to float32 rounding
of the per-row totals) and on the log line (each term's short form after the reward's range).

    check_reward_terms.py RUN_DIR TERM=WEIGHT ... -- mpirun -np 2 quartet train DECK --set ...
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "postprocess"))
import quartet_run  # noqa: E402

NUMBER = r"(-?[0-9.]+)"


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") < 2:
        sys.exit(__doc__)
    split = argv.index("--")
    run_dir, command = argv[0], argv[split + 1:]
    terms = [(t.split("=")[0], float(t.split("=")[1])) for t in argv[1:split]]
    shutil.rmtree(run_dir, ignore_errors=True)
    proc = subprocess.run(command + ["--set", f"run.out={run_dir}"], capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0 or "train: done" not in proc.stdout:
        sys.exit(f"check_reward_terms: the run failed (exit {proc.returncode})")

    run = quartet_run.open_run(os.path.join(run_dir, "run.h5"))
    total = run.metric("reward_mean")
    combined = sum(weight * run.metric(f"reward.{name}") for name, weight in terms)
    worst = max(abs(t - c) for t, c in zip(total, combined))
    print(f"check_reward_terms: {len(total)} iterations; reward_mean against the weighted sum of "
          f"{', '.join(f'{w} x reward.{n}' for n, w in terms)}: largest difference {worst:.2e}")
    if worst > 1e-6 * max(1.0, max(abs(t) for t in total)):
        sys.exit("check_reward_terms: the logged terms do not combine to the total")
    if all(run.metric(f"reward.{name}").max() == run.metric(f"reward.{name}").min() == 0 for name, _ in terms):
        sys.exit("check_reward_terms: every term scored 0 throughout: nothing was combined")

    short = r" \(" + " ".join(f"{re.escape(name)} {NUMBER}" for name, _ in terms) + r"\) \| kl"
    line = re.compile(r"^iter\s+(\d+)/\d+ \| reward " + NUMBER + r" ±[0-9.]+ \[[-0-9., ]+\]" + short)
    lines = [m for m in map(line.match, proc.stdout.splitlines()) if m]
    if len(lines) != len(total):
        sys.exit(f"check_reward_terms: {len(lines)} log lines carry the terms, for {len(total)} iterations")
    for m in lines:
        logged = float(m.group(2))
        parts = [float(m.group(3 + k)) for k in range(len(terms))]
        if abs(logged - sum(w * p for (_, w), p in zip(terms, parts))) > 2e-3 * (1 + len(terms)):
            sys.exit(f"check_reward_terms: iteration {m.group(1)}'s log line: the terms {parts} do not "
                     f"combine to the reward {logged}")
    print("check_reward_terms: the log line's terms combine to its reward on every iteration")


if __name__ == "__main__":
    main()
