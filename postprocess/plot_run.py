#!/usr/bin/env python3
"""Learning curves of one quartet run as PNG files.

    python3 postprocess/plot_run.py runs/demo/run.h5 [--out DIR]

Writes (each only when its metrics are in the file; a missing one is noted and skipped):
  reward.png      reward_mean, a +-reward_std band, reward_min/reward_max
  kl.png          kl, and kl_coef on a second axis
  losses.png      policy_loss, value_loss, entropy (one panel each: their scales differ)
  throughput.png  tokens_per_s
  eval.png        the [eval] series against the iteration they were taken at: greedy pass@1,
                  pass@1 and pass@k (one panel), greedy and sampled reward (another)
  phase_times.png seconds per phase, stacked; each phase is the slowest rank's time, from /timing
                  (from the time_<phase> metrics when the file has no /timing)
DIR defaults to <directory of RUN.h5>/plots. Prints the files written.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402


def _save(fig, out_dir, name, written):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    quartet_run.pyplot().close(fig)
    written.append(path)


def plot_reward(run, out_dir, written, notes):
    if not run.has_metric("reward_mean"):
        notes.append("reward.png skipped: no metric reward_mean")
        return
    x = run.iterations
    mean = run.metric("reward_mean")
    fig, ax = quartet_run.pyplot().subplots(figsize=(7, 4))
    ax.plot(x, mean, label="reward_mean", color="C0")
    if run.has_metric("reward_std"):
        std = run.metric("reward_std")
        ax.fill_between(x, mean - std, mean + std, color="C0", alpha=0.2, label="+-reward_std")
    for name, style in (("reward_min", ":"), ("reward_max", "--")):
        if run.has_metric(name):
            ax.plot(x, run.metric(name), style, color="C0", alpha=0.6, linewidth=1, label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward")
    ax.set_title(f"{run.name}: reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    _save(fig, out_dir, "reward.png", written)


def plot_kl(run, out_dir, written, notes):
    if not run.has_metric("kl"):
        notes.append("kl.png skipped: no metric kl")
        return
    fig, ax = quartet_run.pyplot().subplots(figsize=(7, 4))
    ax.plot(run.iterations, run.metric("kl"), color="C1", label="kl")
    ax.set_xlabel("iteration")
    ax.set_ylabel("kl")
    ax.grid(alpha=0.3)
    if run.has_metric("kl_coef"):
        # The coefficient lives on another scale (and is constant without adaptive control).
        ax2 = ax.twinx()
        ax2.plot(run.iterations, run.metric("kl_coef"), "--", color="C2", label="kl_coef")
        ax2.set_ylabel("kl_coef")
        lines = ax.get_lines() + ax2.get_lines()
        ax.legend(lines, [l.get_label() for l in lines], loc="best", fontsize="small")
    else:
        ax.legend(loc="best", fontsize="small")
    ax.set_title(f"{run.name}: KL to the reference")
    _save(fig, out_dir, "kl.png", written)


def plot_losses(run, out_dir, written, notes):
    names = [n for n in ("policy_loss", "value_loss", "entropy") if run.has_metric(n)]
    missing = [n for n in ("policy_loss", "value_loss", "entropy") if not run.has_metric(n)]
    if missing and names:
        notes.append(f"losses.png without {', '.join(missing)} (not in the file)")
    if not names:
        notes.append("losses.png skipped: no metric policy_loss, value_loss or entropy")
        return
    fig, axes = quartet_run.pyplot().subplots(len(names), 1, figsize=(7, 2.5 * len(names)), sharex=True,
                                             squeeze=False)
    for ax, name, color in zip(axes[:, 0], names, ("C3", "C4", "C5")):
        ax.plot(run.iterations, run.metric(name), color=color)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("iteration")
    axes[0, 0].set_title(f"{run.name}: losses")
    _save(fig, out_dir, "losses.png", written)


def plot_throughput(run, out_dir, written, notes):
    if not run.has_metric("tokens_per_s"):
        notes.append("throughput.png skipped: no metric tokens_per_s")
        return
    fig, ax = quartet_run.pyplot().subplots(figsize=(7, 4))
    ax.plot(run.iterations, run.metric("tokens_per_s"), color="C6")
    ax.set_xlabel("iteration")
    ax.set_ylabel("tokens / s")
    ax.set_title(f"{run.name}: throughput")
    ax.grid(alpha=0.3)
    _save(fig, out_dir, "throughput.png", written)


def plot_eval(run, out_dir, written, notes):
    if len(run.eval_iterations) == 0:
        notes.append("eval.png skipped: no evaluations ([eval]) in the file")
        return
    x = run.eval_iterations
    passes = [n for n in run.eval_metric_names() if n == "greedy_pass@1" or n.startswith("pass@")]
    passes.sort(key=lambda n: (n != "greedy_pass@1", int(n.split("@")[1])))
    rewards = [n for n in ("greedy_reward", "sample_reward") if run.has_eval_metric(n)]
    fig, axes = quartet_run.pyplot().subplots(2, 1, figsize=(7, 6), sharex=True)
    for name in passes:
        axes[0].plot(x, run.eval_metric(name), "o-", label=name, linewidth=1.5 if name == "greedy_pass@1" else 1)
    axes[0].set_ylabel("pass rate")
    axes[0].set_ylim(-0.02, 1.02)
    for name in rewards:
        axes[1].plot(x, run.eval_metric(name), "o-", label=name)
    axes[1].set_ylabel("mean reward")
    axes[1].set_xlabel("iteration")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    prompts = run.eval_metric("prompts")[-1] if run.has_eval_metric("prompts") else float("nan")
    axes[0].set_title(f"{run.name}: evaluation on {prompts:.0f} held-out prompts")
    _save(fig, out_dir, "eval.png", written)


def phase_times(run):
    """{phase: seconds per iteration}: the slowest rank of each phase (the one everybody waits
    for), from /timing; the time_<phase> metrics when the file has no /timing."""
    phases = [p for p in quartet_run.PHASES if p in run.timing_phases()]
    phases += [p for p in run.timing_phases() if p not in phases]
    if phases:
        return {p: np.nan_to_num(run.timing(p)).max(axis=1, initial=0.0) for p in phases}
    return {p: run.metric(f"time_{p}") for p in quartet_run.PHASES if run.has_metric(f"time_{p}")}


def plot_phase_times(run, out_dir, written, notes):
    times = phase_times(run)
    if not times:
        notes.append("phase_times.png skipped: no /timing and no time_<phase> metrics")
        return
    fig, ax = quartet_run.pyplot().subplots(figsize=(7, 4))
    ax.stackplot(run.iterations, *[np.nan_to_num(v) for v in times.values()], labels=list(times), alpha=0.8)
    if run.has_metric("time_iteration"):
        # The whole iteration over the stack shows what the phases leave out (exchange, I/O).
        ax.plot(run.iterations, run.metric("time_iteration"), "k--", linewidth=1, label="time_iteration")
    ax.set_xlabel("iteration")
    ax.set_ylabel("seconds (slowest rank)")
    ax.set_title(f"{run.name}: time per phase")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    _save(fig, out_dir, "phase_times.png", written)


def plot(run, out_dir):
    """Write every plot the run has data for; returns (files written, notes on what was skipped)."""
    os.makedirs(out_dir, exist_ok=True)
    written, notes = [], []
    if len(run.iterations) == 0:
        notes.append("no complete iterations yet: nothing to plot")
        return written, notes
    for fn in (plot_reward, plot_kl, plot_losses, plot_throughput, plot_eval, plot_phase_times):
        fn(run, out_dir, written, notes)
    return written, notes


def main(argv=None):
    parser = argparse.ArgumentParser(prog="plot_run.py", description="Learning curves of a quartet run as PNG files.")
    parser.add_argument("run", metavar="RUN.h5")
    parser.add_argument("--out", metavar="DIR", help="where the PNGs go (default: <directory of RUN.h5>/plots)")
    quartet_run.add_open_arguments(parser)
    args = parser.parse_args(argv)
    run = quartet_run.open_run(args.run, retries=args.retries, wait=args.wait)
    out_dir = args.out or os.path.join(os.path.dirname(os.path.abspath(args.run)), "plots")
    written, notes = plot(run, out_dir)
    for note in notes:
        print(f"note: {note}")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("plot_run.py", main))
