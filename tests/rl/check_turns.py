"""Colocated PPO with actor and critic taking turns (placement.park = never: both stay on the
device, so run_in_turns alternates their optimizer steps) must be the run where each model
trains alone in turn (placement.park = always: the actor's updates, then the critic's), bitwise:
the same metrics every iteration and the same final weights and optimizer state.

    check_turns.py WORKDIR DECK [KEY=VALUE ...] -- MPIRUN... -np N QUARTET
On a GPU with one rank (dist.device=auto), the turns put each optimizer step on a side stream,
beside the other model's forward and backward: this checks that stream ordering too.
"""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

ITERATIONS = 4
UNTIMED = lambda name: not name.startswith("time_") and name != "tokens_per_s"


def fail(msg):
    sys.exit(f"check_turns: {msg}")


def train(command, deck, sets, out, park):
    cmd = command + ["train", deck, "--set", f"run.out={out}", "--set", f"run.iterations={ITERATIONS}",
                     "--set", f"checkpoint.every={ITERATIONS}", "--set", f"placement.park={park}"]
    for kv in sets:
        cmd += ["--set", kv]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def metrics(out):
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        n = int(f.attrs["iterations_complete"])
        if n != ITERATIONS:
            fail(f"{out}/run.h5 holds {n} iterations, expected {ITERATIONS}")
        return {k: np.asarray(f["metrics"][k][:n]) for k in f["metrics"] if UNTIMED(k)}


def final_state(out):
    step = os.path.join(out, "checkpoints", f"step_{ITERATIONS}")
    state = {}
    for name in ("actor.h5", "critic.h5"):
        with h5py.File(os.path.join(step, name), "r") as f:
            f.visititems(lambda k, v: state.__setitem__(f"{name}/{k}", np.asarray(v[()]).tobytes())
                         if isinstance(v, h5py.Dataset) else None)
    return state


def main():
    args = sys.argv[1:]
    split = args.index("--")
    work, deck, *sets = args[:split]
    command = args[split + 1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    alone, turns = os.path.join(work, "alone"), os.path.join(work, "turns")
    out_alone = train(command, deck, sets, alone, "always")
    out_turns = train(command, deck, sets, turns, "never")
    # The runs must have taken the two paths.
    said = "actor and critic take turns"
    if said in out_alone:
        fail("the park = always run took turns: it should have trained the models alone")
    if said not in out_turns:
        fail(f"the park = never run does not say '{said}'")
    m_alone, m_turns = metrics(alone), metrics(turns)
    if sorted(m_alone) != sorted(m_turns):
        fail(f"different metrics: {sorted(m_alone)} vs {sorted(m_turns)}")
    for k in ("policy_loss", "value_loss", "grad_norm_actor", "grad_norm_critic"):
        if k not in m_alone:
            fail(f"metric {k} is missing")
    for k in m_alone:
        if not np.array_equal(m_alone[k], m_turns[k]):
            i = int(np.nonzero(m_alone[k] != m_turns[k])[0][0])
            fail(f"metric {k} differs first at iteration {i + 1}: {m_alone[k][i]!r} alone, {m_turns[k][i]!r} in turns")
    s_alone, s_turns = final_state(alone), final_state(turns)
    if sorted(s_alone) != sorted(s_turns):
        fail("the final checkpoints hold different tensors")
    for k in s_alone:
        if s_alone[k] != s_turns[k]:
            fail(f"final checkpoint tensor {k} differs")
    print(f"check_turns: {len(m_alone)} metrics over {ITERATIONS} iterations and {len(s_alone)} checkpoint tensors "
          f"are bitwise equal with the models in turns and alone")


if __name__ == "__main__":
    main()
