"""A reader that polls run.h5 while `quartet train` writes it must never see a torn iteration:
whenever it can open the file, every iteration up to iterations_complete has its metric rows,
its iteration number, and (when stored) a complete rollouts group; and with [eval], exactly the
evaluations of those iterations.

    check_concurrent_reader.py RUN_DIR -- mpirun -np 3 quartet train DECK --set ...
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["QUARTET_SOURCE_DIR"], "postprocess"))
import quartet_run  # noqa: E402

ROLLOUT_DATASETS = {"sequences", "attention_mask", "action_mask", "scores", "logprobs", "advantages",
                    "prompt", "completion"}


def check(path):
    """Returns iterations_complete of a consistent file, or None if it could not be opened."""
    try:
        run = quartet_run.open_run(path)
    except quartet_run.RunFileError:
        return None  # being written right now: a reader retries
    n = run.iterations_complete
    if list(run.iterations) != list(range(1, n + 1)):
        sys.exit(f"torn: iterations {list(run.iterations)} with iterations_complete {n}")
    for name in run.metric_names():
        values = run.metric(name)
        if len(values) != n:
            sys.exit(f"torn: metric {name} has {len(values)} rows for {n} complete iterations")
    deck = run.deck()
    if deck.get("eval.prompts"):
        every, at_start = int(deck["eval.every"]), deck["eval.at_start"] == "true"
        # The evaluation at 0 is written with iteration 1.
        want = ([0] if at_start and n >= 1 else []) + [i for i in range(1, n + 1) if every and i % every == 0]
        if list(run.eval_iterations) != want:
            sys.exit(f"torn: evaluations at {list(run.eval_iterations)} with iterations_complete {n}, expected {want}")
        for name in run.eval_metric_names():
            if len(run.eval_metric(name)) != len(want):
                sys.exit(f"torn: eval metric {name} has {len(run.eval_metric(name))} rows for {len(want)} evaluations")
    for it in run.rollout_iterations():
        if it > n:
            sys.exit(f"the reader returned rollouts of iteration {it} beyond iterations_complete {n}")
        missing = ROLLOUT_DATASETS - set(run.rollout(it))
        if missing:
            sys.exit(f"torn: rollouts of iteration {it} lack {sorted(missing)}")
    return n


def main():
    run_dir = sys.argv[1]
    cmd = [a for a in sys.argv[2:] if a != "--"]
    path = os.path.join(run_dir, "run.h5")
    # From the beginning: no run file, and no checkpoints that train would resume from.
    shutil.rmtree(run_dir, ignore_errors=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, failed_opens = [], 0
    while proc.poll() is None:
        if os.path.exists(path):
            n = check(path)
            if n is None:
                failed_opens += 1
            else:
                seen.append(n)
        time.sleep(0.01)
    out = proc.stdout.read()
    if proc.returncode != 0:
        sys.stdout.write(out)
        sys.exit(f"quartet exited with {proc.returncode}")
    final = check(path)
    mid_run = sorted(set(n for n in seen if 0 < n < final))
    print(f"concurrent reader: {len(seen)} consistent reads ({len(mid_run)} distinct iteration counts seen "
          f"mid-run), {failed_opens} opens refused while writing, final iterations_complete {final}")
    if len(mid_run) < 3:
        sys.exit("the reader saw too few iterations while the run was going to show anything")


if __name__ == "__main__":
    main()
