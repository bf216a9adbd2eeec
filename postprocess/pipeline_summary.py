#!/usr/bin/env python3
"""The pipeline demo's result: held-out exact match after each stage, from the stages' run files.

    python3 postprocess/pipeline_summary.py runs/pipeline

Reads <dir>/{sft,rm,ppo,grpo}/run.h5 (those that exist) and prints one table:
  - sft   the last held-out evaluation's greedy exact match (/eval/exact_match);
  - rm    the last held-out pairwise accuracy (/eval/accuracy): how often the reward model
          ranks the rule's preferred response first;
  - ppo, grpo  (ppo is named as trained on the rule when there is no rm run: the demo's stand-in)
          the held-out greedy exact match before the first iteration and after the last
          (/eval/greedy_pass@1 graded by eval.reward = match), and the training reward's mean
          over the first and the last five iterations (/metrics/reward_mean).
A stage whose training reward rose while its held-out exact match did not is named as reward
hacking: the policy pleased its reward without doing the task better. Exit 1 when a run file
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


def rl_row(run):
    """(exact match before, after, reward over the first five iterations, the last five)."""
    iterations = run.eval_iterations
    exact = run.eval_metric("greedy_pass@1")
    if len(exact) < 2 or iterations[0] != 0:
        raise quartet_run.RunFileError(f"{run.path}: needs an evaluation before the first iteration "
                                       "(eval.at_start = true) and one after the last")
    reward = run.metric("reward_mean")
    return float(exact[0]), float(exact[-1]), float(reward[:5].mean()), float(reward[-5:].mean())


def summarise(directory):
    lines, warnings = [], []
    lines.append(f"{'stage':<6} {'trained on':<24} {'held-out exact match':<22} training reward")
    for stage, what in STAGES:
        path = os.path.join(directory, stage, "run.h5")
        if not os.path.exists(path):
            continue
        run = quartet_run.open_run(path, retries=3)
        if stage == "ppo" and not os.path.exists(os.path.join(directory, "rm", "run.h5")):
            what = "the rule (no RM yet)"  # cmake/pipeline.sh's stand-in while there is no rm stage
        if stage == "sft":
            lines.append(f"{stage:<6} {what:<24} {last_eval(run, 'exact_match'):<22.3f} -")
        elif stage == "rm":
            accuracy = f"pairwise accuracy {last_eval(run, 'accuracy'):.3f}"
            lines.append(f"{stage:<6} {what:<24} {accuracy:<22} -")
        else:
            before, after, r0, r1 = rl_row(run)
            exact = f"{before:.3f} -> {after:.3f}"
            lines.append(f"{stage:<6} {what:<24} {exact:<22} {r0:.3f} -> {r1:.3f}")
            if r1 - r0 >= REWARD_RISE and after - before < ACCURACY_RISE:
                warnings.append(f"{stage}: reward hacking: its training reward rose by {r1 - r0:.3f} while "
                                f"held-out exact match moved by {after - before:+.3f}")
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
