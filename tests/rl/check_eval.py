"""[eval] end to end: runs `quartet train` with evaluation on and off and checks

  - that turning evaluation on changes nothing of the training: every untimed /metrics series
    and the final checkpoint's weights are bitwise those of the run without it;
  - the /eval series: its points (iterations), its metrics, their ranges and their order
    (pass@1 <= pass@k <= pass@k' for k < k');
  - the log's `eval` lines (after their iteration's line, with the numbers of run.h5), the eval
    phase in /timing (time only where an evaluation was taken), `quartet inspect`, plot_run.py;
  - scenario demo: that the greedy reward on the held-out prompts rises over the run.

    check_eval.py WORKDIR SCENARIO -- MPIRUN... -np QUARTET
SCENARIO: demo (inputs/demo.deck, rule reward, 3 ranks) | reward_model (a reward model on its
          own rank behind 4 actor ranks, one of which has no eval prompt; and colocated on 2) |
          eval_reward (a colocated reward model trains; eval.reward = match and rule:sort_digits
          grade the evaluation instead, and training is bitwise the same)
Run from the repository root.
"""
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

HELD_OUT = "inputs/prompts/sort_digits_heldout.jsonl"
UNTIMED = lambda name: not name.startswith("time_") and name != "tokens_per_s"  # noqa: E731
EVAL_LINE = re.compile(r"^eval\s+(\d+)/(\d+) \| greedy pass@1 ([0-9.]+) reward ([0-9.]+) len ([0-9.]+)")
ITER_LINE = re.compile(r"^iter\s+(\d+)/(\d+) \|")


def fail(msg):
    sys.exit(f"check_eval: {msg}")


def train(launcher, quartet, np_, deck, out, sets):
    cmd = launcher + [str(np_), quartet, "train", deck, "--set", f"run.out={out}"]
    for s in sets:
        cmd += ["--set", s]
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    sys.stdout.write(run.stdout[-4000:])
    if run.returncode != 0:
        fail(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run.stdout


def read(out):
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        n = int(f.attrs["iterations_complete"])
        metrics = {k: np.asarray(f["metrics"][k][:n]) for k in f["metrics"]}
        timing_eval = np.asarray(f["timing"]["eval"][:n])
        evals = {k: np.asarray(v[()]) for k, v in f["eval"].items()} if "eval" in f else {}
    return n, metrics, timing_eval, evals


def checkpoint(out, iterations):
    state = {}
    step = os.path.join(out, "checkpoints", f"step_{iterations}")
    for name in sorted(os.listdir(step)):
        if not name.endswith(".h5") or name == "trainer.h5":
            continue
        with h5py.File(os.path.join(step, name), "r") as f:
            f.visititems(lambda k, v: state.__setitem__(f"{name}/{k}", np.asarray(v[()]).tobytes())
                         if isinstance(v, h5py.Dataset) else None)
    return state


def same_training(off, on, iterations, what, off_evaluates=False):
    n_off, m_off, t_off, e_off = read(off)
    n_on, m_on, _, _ = read(on)
    if n_off != iterations or n_on != iterations:
        fail(f"{what}: run files hold {n_off} and {n_on} iterations, expected {iterations}")
    if e_off and not off_evaluates:
        fail(f"{what}: the run without [eval] has an /eval group")
    if np.any(t_off != 0) and not off_evaluates:
        fail(f"{what}: the run without [eval] spent time in the eval phase: {t_off.max(axis=1)}")
    names = sorted(k for k in m_off if UNTIMED(k))
    if names != sorted(k for k in m_on if UNTIMED(k)):
        fail(f"{what}: eval on and off have different metrics")
    for k in names:
        if not np.array_equal(m_off[k], m_on[k]):
            i = int(np.nonzero(m_off[k] != m_on[k])[0][0])
            fail(f"{what}: metric {k} differs with eval on, first at iteration {i + 1}: {m_off[k][i]!r} vs {m_on[k][i]!r}")
    s_off, s_on = checkpoint(off, iterations), checkpoint(on, iterations)
    if sorted(s_off) != sorted(s_on) or any(s_off[k] != s_on[k] for k in s_off):
        fail(f"{what}: the final checkpoint's tensors differ with eval on")
    print(f"check_eval: {what}: {len(names)} untimed metrics over {iterations} iterations and {len(s_off)} checkpoint "
          "tensors are bitwise equal")


def check_series(out, log, iterations, points, prompts, samples, ks, what):
    _, _, timing_eval, evals = read(out)
    got = evals.get("iteration")
    if got is None or list(got) != points:
        fail(f"{what}: /eval/iteration is {None if got is None else list(got)}, expected {points}")
    want = {"iteration", "prompts", "greedy_pass@1", "greedy_reward", "greedy_length"}
    if samples:
        want |= {"samples", "pass@1", "sample_reward", "sample_length"} | {f"pass@{k}" for k in ks if k != 1}
    if set(evals) != want:
        fail(f"{what}: /eval holds {sorted(evals)}, expected {sorted(want)}")
    for name, v in evals.items():
        if len(v) != len(points) or not np.all(np.isfinite(v)):
            fail(f"{what}: /eval/{name} is {v}")
    if not np.all(evals["prompts"] == prompts):
        fail(f"{what}: /eval/prompts is {evals['prompts']}, expected {prompts} each time")
    for name in ("greedy_pass@1",) + (("pass@1",) + tuple(f"pass@{k}" for k in ks if k != 1) if samples else ()):
        if np.any(evals[name] < 0) or np.any(evals[name] > 1):
            fail(f"{what}: /eval/{name} outside [0, 1]: {evals[name]}")
    if samples:
        order = ["pass@1"] + [f"pass@{k}" for k in sorted(ks) if k != 1]
        for a, b in zip(order, order[1:]):
            if np.any(evals[a] > evals[b] + 1e-12):
                fail(f"{what}: {a} {evals[a]} exceeds {b} {evals[b]}")
        if not np.all(evals["samples"] == samples):
            fail(f"{what}: /eval/samples is {evals['samples']}")
    lengths = evals["greedy_length"]
    if np.any(lengths < 1):
        fail(f"{what}: greedy completions of {lengths} tokens (each has at least one)")
    # The eval phase has time exactly in the iterations that evaluated (one at 0 counts in 1).
    timed = sorted({max(1, p) for p in points})
    has_time = [i + 1 for i in range(len(timing_eval)) if timing_eval[i].max() > 0]
    if has_time != timed:
        fail(f"{what}: the eval phase took time in iterations {has_time}, expected {timed}")
    # The log: an eval line per point, after its iteration's line, with run.h5's numbers.
    lines = log.splitlines()
    seen = []
    last_iteration = 0
    for line in lines:
        m = ITER_LINE.match(line)
        if m:
            last_iteration = int(m.group(1))
        m = EVAL_LINE.match(line)
        if m:
            point = int(m.group(1))
            if point != last_iteration:
                fail(f"{what}: the eval line of iteration {point} follows iteration {last_iteration}'s line")
            i = len(seen)
            for value, name in ((m.group(3), "greedy_pass@1"), (m.group(4), "greedy_reward")):
                if i < len(points) and abs(float(value) - evals[name][i]) > 5.1e-4:
                    fail(f"{what}: the log's {name} at {point} is {value}, run.h5 has {evals[name][i]}")
            seen.append(point)
    if seen != points:
        fail(f"{what}: eval lines for iterations {seen}, expected {points}")
    print(f"check_eval: {what}: /eval has points {points} with {len(evals) - 1} metrics, and the log and /timing agree")
    return evals


def scenario_demo(work, launcher, quartet):
    iterations = 40
    base = [f"run.iterations={iterations}", "checkpoint.every=0"]
    ev = [f"eval.prompts={HELD_OUT}", "eval.every=20", "eval.at_start=true", "eval.samples=4", "eval.k=2,4"]
    off, on = os.path.join(work, "off"), os.path.join(work, "on")
    train(launcher, quartet, 3, "inputs/demo.deck", off, base)
    log = train(launcher, quartet, 3, "inputs/demo.deck", on, base + ev)
    same_training(off, on, iterations, "demo")
    evals = check_series(on, log, iterations, [0, 20, 40], 64, 4, [2, 4], "demo")
    g = evals["greedy_reward"]
    print(f"check_eval: demo: greedy reward on the held-out prompts {np.round(g, 3).tolist()}")
    if not g[-1] >= g[0] + 0.1:
        fail(f"demo: the greedy reward on the held-out prompts did not rise by 0.1: {g}")
    text = subprocess.run([quartet, "inspect", os.path.join(on, "run.h5")], capture_output=True, text=True).stdout
    if "eval points: 3 (iterations 0 20 40)" not in text or not re.search(r"greedy_reward\s", text):
        fail(f"quartet inspect does not show the evaluations:\n{text}")
    plots = os.path.join(work, "plots")
    p = subprocess.run([sys.executable, "postprocess/plot_run.py", os.path.join(on, "run.h5"), "--out", plots],
                       capture_output=True, text=True, env=dict(os.environ, MPLBACKEND="Agg"))
    if p.returncode != 0 or not os.path.exists(os.path.join(plots, "eval.png")):
        fail(f"plot_run.py did not write eval.png:\n{p.stdout}\n{p.stderr}")
    print("check_eval: quartet inspect and plot_run.py show the evaluations")


def scenario_reward_model(work, launcher, quartet):
    # 4 actor ranks and 3 prompts: actor rank 3 evaluates none, and still takes part.
    ev = [f"eval.prompts={HELD_OUT}", "eval.count=3", "eval.every=2", "eval.at_start=true", "eval.samples=3",
          "eval.k=2", "eval.pass_threshold=0"]
    deck = "tests/decks/train_disjoint_8.deck"
    off, on = os.path.join(work, "disjoint_off"), os.path.join(work, "disjoint_on")
    train(launcher, quartet, 8, deck, off, [])
    log = train(launcher, quartet, 8, deck, on, ev)
    same_training(off, on, 3, "reward model on its own rank")
    check_series(on, log, 3, [0, 2, 3], 3, 3, [2], "reward model on its own rank")
    deck = "tests/decks/train_colocated.deck"
    off, on = os.path.join(work, "colocated_off"), os.path.join(work, "colocated_on")
    train(launcher, quartet, 2, deck, off, [])
    log = train(launcher, quartet, 2, deck, on, [f"eval.prompts={HELD_OUT}", "eval.count=5", "eval.every=1"])
    same_training(off, on, 3, "colocated reward model")
    check_series(on, log, 3, [1, 2, 3], 5, 0, [], "colocated reward model")


def scenario_eval_reward(work, launcher, quartet):
    deck = "tests/decks/train_colocated.deck"
    ev = [f"eval.prompts={HELD_OUT}", "eval.count=8", "eval.every=1", "eval.samples=2", "eval.k=2"]
    runs = {}
    for name, extra in (("model", []), ("match", ["eval.reward=match"]), ("rule", ["eval.reward=rule:sort_digits"])):
        out = os.path.join(work, name)
        log = train(launcher, quartet, 2, deck, out, ev + extra)
        runs[name] = check_series(out, log, 3, [1, 2, 3], 8, 2, [2], f"eval by {name}")
        if name != "model":
            same_training(os.path.join(work, "model"), out, 3, f"eval.reward = {name} against the run's own",
                          off_evaluates=True)
    match, rule, model = runs["match"], runs["rule"], runs["model"]
    # match and the rule both give 1 exactly to the sorted digits: the same completions pass.
    for key in ("greedy_pass@1", "pass@1", "pass@2"):
        if not np.array_equal(match[key], rule[key]):
            fail(f"eval_reward: {key} under match {match[key]} and under rule:sort_digits {rule[key]} differ")
    # match scores 0 or 1, so its mean is the pass rate; the rule's partial credit is at least it.
    if not np.array_equal(match["greedy_reward"], match["greedy_pass@1"]):
        fail(f"eval_reward: match's greedy reward {match['greedy_reward']} is not its pass rate {match['greedy_pass@1']}")
    if np.any(rule["greedy_reward"] < match["greedy_reward"]):
        fail(f"eval_reward: the rule's partial credit {rule['greedy_reward']} is below match's {match['greedy_reward']}")
    if np.array_equal(model["greedy_reward"], match["greedy_reward"]):
        fail(f"eval_reward: the reward model's eval reward equals match's ({model['greedy_reward']}): eval.reward did nothing")
    print(f"check_eval: eval_reward: greedy reward: reward model {np.round(model['greedy_reward'], 3).tolist()}, "
          f"match {match['greedy_reward'].tolist()}, rule {np.round(rule['greedy_reward'], 3).tolist()}")


def main():
    args = sys.argv[1:]
    split = args.index("--")
    work, scenario = args[:split]
    command = args[split + 1:]
    launcher, quartet = command[:-1], command[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    scenarios = {"demo": scenario_demo, "reward_model": scenario_reward_model, "eval_reward": scenario_eval_reward}
    scenarios[scenario](work, launcher, quartet)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
