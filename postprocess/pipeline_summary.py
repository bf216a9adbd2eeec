#!/usr/bin/env python3
"""The pipeline demo's result: held-out exact match after each stage, from the stages' run files.

    python3 postprocess/pipeline_summary.py runs/pipeline

Reads <dir>/{sft,rm,ppo,grpo}/run.h5 (those that exist) and prints one table:
  - sft   the last held-out evaluation's greedy exact match (/eval/exact_match);
  - rm    the last held-out pairwise accuracy (/eval/accuracy): how often the reward model
          ranks the rule's preferred response first;
  - ppo, grpo  the held-out greedy exact match before the first iteration and after the last
          (/eval/greedy_pass@1 graded by eval.reward = match), and the training reward's mean
          over the first and the last five iterations (/metrics/reward_mean).
Under the table, a stage whose training reward rose while its held-out exact match did not is
named as reward hacking: over the whole run, or from its best evaluation to its end (the policy
went on pleasing its reward after it had stopped doing the task better). Exit 1 when a run file
is missing a number the table needs.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402

# How far the training reward must rise, and exact match fail to, for the line that names
# reward hacking: a rise of a tenth of the reward's range against less than 2 points of accuracy.
REWARD_RISE = 0.10
ACCURACY_RISE = 0.02
STAGES = (
    ("sft", "demonstrations"),
    ("rm", "rule-labelled pairs"),
    ("ppo", "the learnt reward model"),
    ("grpo", "the rule"),
)


def last_eval(run, name):
    values = run.eval_metric(name)
    if len(values) == 0:
        raise quartet_run.RunFileError(f"{run.path}: /eval/{name} has no rows")
    return float(values[-1])


def rl_evaluations(run):
    """[(iteration, held-out exact match, the training reward's mean over the five iterations
    up to it; the first five for the evaluation before the first iteration)]."""
    iterations = run.eval_iterations
    exact = run.eval_metric("greedy_pass@1")
    if len(exact) < 2 or iterations[0] != 0:
        raise quartet_run.RunFileError(f"{run.path}: needs an evaluation before the first iteration "
                                       "(eval.at_start = true) and one after the last")
    reward, done = run.metric("reward_mean"), run.iterations
    points = []
    for it, e in zip(iterations, exact):
        near = reward[(done <= max(int(it), 5)) & (done > max(int(it), 5) - 5)]
        points.append((int(it), float(e), float(near.mean())))
    return points


def hacking(stage, points):
    """The reward-hacking line of a stage, or None: the reward rose by REWARD_RISE while exact
    match rose by less than ACCURACY_RISE, from the start or from the best evaluation on."""
    best = max(range(len(points)), key=lambda i: (points[i][1], -i))
    for start, since in ((0, "over the run"), (best, f"after its best evaluation (iteration {points[best][0]})")):
        (_, e0, r0), (_, e1, r1) = points[start], points[-1]
        if start < len(points) - 1 and r1 - r0 >= REWARD_RISE and e1 - e0 < ACCURACY_RISE:
            return (f"{stage}: reward hacking {since}: its training reward rose by {r1 - r0:.3f} while held-out "
                    f"exact match moved by {e1 - e0:+.3f}")
    return None


def summarise(directory):
    lines, warnings = [], []
    lines.append(f"{'stage':<6} {'trained on':<24} {'held-out exact match':<22} training reward")
    for stage, what in STAGES:
        path = os.path.join(directory, stage, "run.h5")
        if not os.path.exists(path):
            continue
        run = quartet_run.open_run(path, retries=3)
        if stage == "sft":
            lines.append(f"{stage:<6} {what:<24} {last_eval(run, 'exact_match'):<22.3f} -")
        elif stage == "rm":
            accuracy = f"pairwise accuracy {last_eval(run, 'accuracy'):.3f}"
            lines.append(f"{stage:<6} {what:<24} {accuracy:<22} -")
        else:
            points = rl_evaluations(run)
            reward = run.metric("reward_mean")
            exact = f"{points[0][1]:.3f} -> {points[-1][1]:.3f}"
            lines.append(f"{stage:<6} {what:<24} {exact:<22} {reward[:5].mean():.3f} -> {reward[-5:].mean():.3f}")
            line = hacking(stage, points)
            if line:
                warnings.append(line)
    return lines, warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="the pipeline's run directory (runs/pipeline)")
    args = ap.parse_args()
    try:
        lines, warnings = summarise(args.directory)
    except (quartet_run.RunFileError, KeyError, OSError) as e:
        print(f"pipeline_summary: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines + warnings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
