"""rollout.reuse_prompt_cache against the full pass, end to end: `quartet train` runs twice on
the same deck (the actor's old log-probs by a full forward pass, then continuing from
generation's KV cache), storing iteration 1's rollouts. Generation does not depend on the
setting, so both runs must sample the same sequences, and the old log-probs of every real
action must agree to float32 rounding; the KL estimate, old log-probs against the
reference's, must agree too.

    check_prompt_cache.py RUN_DIR -- mpirun -np 2 quartet train DECK --set ...
"""
import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np


def run(cmd, out, reuse):
    shutil.rmtree(out, ignore_errors=True)
    full = cmd + ["--set", f"run.out={out}", "--set", "output.rollouts_every=1",
                  "--set", f"rollout.reuse_prompt_cache={'true' if reuse else 'false'}"]
    proc = subprocess.run(full, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0 or "train: done" not in proc.stdout:
        sys.exit(f"check_prompt_cache: the run with reuse_prompt_cache={reuse} failed (exit {proc.returncode})")
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        r = f["rollouts"]
        first = r[sorted(r.keys(), key=int)[0]]
        return {k: first[k][()] for k in ("sequences", "action_mask", "logprobs", "ref_logprobs") if k in first}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [c for c in args.command if c != "--"]
    full = run(cmd, os.path.join(args.run_dir, "full"), False)
    cached = run(cmd, os.path.join(args.run_dir, "cached"), True)
    if not np.array_equal(full["sequences"], cached["sequences"]):
        sys.exit("check_prompt_cache: the two runs sampled different sequences in iteration 1")
    mask = full["action_mask"] != 0
    if mask.sum() == 0:
        sys.exit("check_prompt_cache: no actions to compare")
    a, b = full["logprobs"][mask], cached["logprobs"][mask]
    worst = float(np.max(np.abs(a - b)))
    print(f"check_prompt_cache: {int(mask.sum())} actions, largest old log-prob difference {worst:.2e}")
    if not np.allclose(b, a, rtol=1e-5, atol=1e-5):
        sys.exit("check_prompt_cache: the old log-probs on the cache differ from the full pass's")
    if "ref_logprobs" not in full:
        sys.exit("check_prompt_cache: the run has no reference log-probs to take the KL against")
    kl_full = (full["logprobs"] - full["ref_logprobs"])[mask]
    kl_cached = (cached["logprobs"] - cached["ref_logprobs"])[mask]
    if not np.allclose(kl_cached, kl_full, rtol=1e-5, atol=1e-5):
        sys.exit("check_prompt_cache: the per-token KL estimates differ")


if __name__ == "__main__":
    main()
