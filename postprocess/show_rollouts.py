#!/usr/bin/env python3
"""Print rollouts of a quartet run as text.

    python3 postprocess/show_rollouts.py runs/demo/run.h5 [--iteration N] [--count K]

For each shown sample: its prompt, its completion, the score, the mean advantage over the response
tokens, and the KL to the reference (sum over the response of logprobs - ref_logprobs, the k1
estimate) when the group has ref_logprobs. The iteration defaults to the last one with rollouts;
the K samples are spread evenly over the batch (its rows come from the actor ranks in order, so
this shows every rank's share rather than rank 0's only).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402


def pick_rows(batch, count):
    """`count` row indices spread evenly over a batch of `batch` rows."""
    if count >= batch:
        return list(range(batch))
    return sorted({int(round(i)) for i in np.linspace(0, batch - 1, count)})


def sample_summary(group, row):
    """{score, mean_advantage, kl}: the numbers shown beside one sample (kl None when the run has
    no reference log-probs)."""
    mask = np.asarray(group["action_mask"][row], dtype=np.float64) if "action_mask" in group else None

    def masked(values):
        values = np.asarray(values[row], dtype=np.float64)
        if mask is None:
            return values
        return values[mask > 0]

    out = {"score": float(group["scores"][row]) if "scores" in group else None, "mean_advantage": None, "kl": None}
    if "advantages" in group:
        adv = masked(group["advantages"])
        out["mean_advantage"] = float(adv.mean()) if adv.size else 0.0
    if "ref_logprobs" in group and "logprobs" in group:
        out["kl"] = float((masked(group["logprobs"]) - masked(group["ref_logprobs"])).sum())
    return out


def _field(label, text):
    """A labelled text, later lines indented under the first (completions can span lines)."""
    return label + str(text).replace("\n", "\n" + " " * len(label))


def format_rollouts(run, iteration, count):
    group = run.rollout(iteration)
    batch = len(group.get("prompt", [])) or (len(group["scores"]) if "scores" in group else 0)
    rows = pick_rows(batch, count)
    lines = [f"{run.name}: iteration {iteration}, {len(rows)} of {batch} rollouts"]
    if "scores" in group and batch:
        scores = np.asarray(group["scores"], dtype=np.float64)
        lines.append(f"batch score: mean {scores.mean():.4g}, min {scores.min():.4g}, max {scores.max():.4g}")
    for row in rows:
        s = sample_summary(group, row)
        numbers = []
        if s["score"] is not None:
            numbers.append(f"score {s['score']:.4g}")
        if s["mean_advantage"] is not None:
            numbers.append(f"mean advantage {s['mean_advantage']:+.4g}")
        if s["kl"] is not None:
            numbers.append(f"kl {s['kl']:+.4g}")
        lines.append("")
        lines.append(f"--- sample {row}: {', '.join(numbers)}")
        lines.append(_field("prompt:     ", group["prompt"][row] if "prompt" in group else "(not stored)"))
        lines.append(_field("completion: ", group["completion"][row] if "completion" in group else "(not stored)"))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="show_rollouts.py", description="Print rollouts of a quartet run.")
    parser.add_argument("run", metavar="RUN.h5")
    parser.add_argument("--iteration", type=int, metavar="N", help="iteration to show (default: the last with rollouts)")
    parser.add_argument("--count", type=int, default=4, metavar="K", help="samples to show (default 4)")
    quartet_run.add_open_arguments(parser)
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    run = quartet_run.open_run(args.run, retries=args.retries, wait=args.wait)
    available = run.rollout_iterations()
    if not available:
        raise quartet_run.RunFileError(
            f"{args.run}: no complete rollouts in this run (they are written every output.rollouts_every iterations)")
    iteration = available[-1] if args.iteration is None else args.iteration
    print(format_rollouts(run, iteration, args.count))
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("show_rollouts.py", main))
