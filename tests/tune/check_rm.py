"""`quartet rm` end to end, on inputs/rm/sort_digits.deck (run from the repository root).

    check_rm.py WORKDIR SCENARIO -- MPIRUN... -np QUARTET
SCENARIO:
  learn    the training loss falls and the held-out pairwise accuracy rises past 0.8 (/eval at
           step 0 and every eval_every steps); the step's loss and gradient are the same on 1 rank
           as on 2 (the same pairs, split and micro-batched otherwise); the shipped pair files are
           what make_sort_pairs.py writes, and every pair's chosen response scores above its
           rejected one under the rule
  resume   SIGUSR1 to every rank, SIGTERM to one rank: exit 75 with a checkpoint; the resumed runs
           equal the uninterrupted one bitwise (metrics, /eval, final weights and optimizer
           state); sft does not continue an rm checkpoint
  export   `quartet export` of the final checkpoint (no --role: its one model) is a
           LlamaForSequenceClassification that transformers loads, whose scores of the held-out
           pairs give the run's last evaluation (accuracy, loss, mean rewards)
  handoff  an sft run's export starts the reward model (its body bitwise, a fresh score head);
           `quartet train` takes the rm export as model.reward.path for 2 iterations, the scores
           in its run file being transformers' scores of the same rollouts
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_check import EXIT_RESUBMIT, Run, fail, run_to_end, same_run, say, series, stage, use  # noqa: E402

DECK = "inputs/rm/sort_digits.deck"
HELDOUT = "inputs/rm/sort_digits_heldout_pairs.jsonl"


def rm(launcher, np_, out, *sets):
    return stage("rm", DECK, launcher, np_, out, *sets)


def check_pair_files():
    """The shipped pairs are the script's output, and the rule prefers each chosen response."""
    sys.path.insert(0, "inputs/prepare")
    import make_sort_pairs
    for prompts, pairs, seed in [("inputs/prompts/sort_digits.jsonl", "inputs/rm/sort_digits_pairs.jsonl", 1),
                                 ("inputs/prompts/sort_digits_heldout.jsonl", HELDOUT, 2)]:
        fresh = os.path.join(WORK, os.path.basename(pairs))
        subprocess.run([sys.executable, "inputs/prepare/make_sort_pairs.py", "--prompts", prompts, "--out", fresh,
                        "--seed", str(seed)], check=True)
        if open(fresh, "rb").read() != open(pairs, "rb").read():
            fail(f"{pairs} is not what make_sort_pairs.py --seed {seed} writes")
        for line in open(pairs):
            row = json.loads(line)
            answer = "".join(sorted(row["prompt"][5:-1]))
            if not make_sort_pairs.rule_score(answer, row["chosen"]) > make_sort_pairs.rule_score(answer, row["rejected"]):
                fail(f"{pairs}: the rule does not prefer the chosen response of {row}")
    say("the shipped pair files are make_sort_pairs.py's, and the rule prefers every chosen response")


def scenario_learn(launcher, work):
    check_pair_files()
    out = os.path.join(work, "learn")
    text = run_to_end(rm(launcher, 2, out, "rm.eval_at_start=true"))
    n, s = series(out)
    loss = s["loss"]
    first, last = loss[:8].mean(), loss[-8:].mean()
    say(f"training loss {first:.3f} over the first 8 steps, {last:.3f} over the last 8 ({n} steps)")
    if not last < 0.5 * first:
        fail(f"the training loss did not fall by half: {first:.4f} -> {last:.4f}")
    steps = list(s["eval/iteration"])
    if steps != list(range(0, 257, 32)):
        fail(f"evaluations at steps {steps}, expected 0, 32, ..., 256")
    acc, hl, gap = s["eval/accuracy"], s["eval/loss"], s["eval/reward_margin"]
    say(f"held-out accuracy {acc[0]:.3f} -> {acc[-1]:.3f}, loss {hl[0]:.3f} -> {hl[-1]:.3f}, "
        f"reward margin {gap[0]:.3f} -> {gap[-1]:.3f}")
    if not (acc[-1] > 0.8 and acc[-1] > acc[0] + 0.2 and hl[-1] < 0.6 * hl[0] and gap[-1] > gap[0]):
        fail("the held-out numbers did not improve enough (accuracy > 0.8 and +0.2, loss down 40%, margin up)")
    if list(s["eval/pairs"]) != [128] * 9:
        fail(f"evaluated {s['eval/pairs']} pairs, expected all 128 held-out pairs each time")
    if not np.allclose(s["reward_margin"], s["chosen_reward"] - s["rejected_reward"], rtol=1e-6, atol=1e-6):
        fail("the step's reward_margin is not chosen_reward - rejected_reward")
    done = re.search(r"^rm: done in (\S+)$", text, re.M)
    say(f"the deck's run took {done.group(1) if done else '?'}")
    # One step, 32 pairs: 2 ranks x 16 (micro-batches of 16 pairs), 1 rank x 32 (micro-batches of 5).
    firsts = {}
    for name, np_, sets in [("2x16", 2, []), ("1x32", 1, ["placement.reward=1", "rm.batch=32", "train.micro_batch=5"])]:
        d = os.path.join(work, "one_step_" + name)
        run_to_end(rm(launcher, np_, d, "rm.steps=1", *sets))
        _, m = series(d)
        firsts[name] = {k: float(m[k][0]) for k in ("loss", "grad_norm", "units", "accuracy", "reward_margin")}
    ref = firsts["2x16"]
    for name, got in firsts.items():
        if got["units"] != ref["units"] or any(abs(got[k] - ref[k]) > 1e-5 * max(abs(ref[k]), 1e-3)
                                               for k in ("loss", "grad_norm", "accuracy", "reward_margin")):
            fail(f"the first step on {name} ({got}) is not the one on 2x16 ({ref})")
    say(f"the first step's loss {ref['loss']:.6f} and gradient norm {ref['grad_norm']:.6f} are the same on "
        "2 ranks x 16 pairs and 1 rank x 32 pairs")


def scenario_resume(launcher, work):
    steps = 64
    common = [f"rm.steps={steps}", "checkpoint.every=16", "rm.eval_every=20", "rm.eval_count=32"]
    reference = os.path.join(work, "uninterrupted")
    run_to_end(rm(launcher, 2, reference, *common))
    for what, how in [("SIGUSR1 to every rank", "all"), ("SIGTERM to rank 1 alone", "one")]:
        out = os.path.join(work, how)
        r = rm(launcher, 2, out, *common)
        r.wait_for_step(24)
        ranks = r.ranks()
        if len(ranks) != 2:
            fail(f"expected 2 rank processes, found {ranks}")
        for pid in (ranks if how == "all" else ranks[-1:]):
            os.kill(pid, signal.SIGUSR1 if how == "all" else signal.SIGTERM)
        output = run_to_end(r, EXIT_RESUBMIT)
        m = re.search(r"rm: stopping after step (\d+)", output)
        if not m:
            fail(f"no 'stopping after step' line:\n{output[-3000:]}")
        n = int(m.group(1))
        if os.readlink(os.path.join(out, "checkpoints", "latest")) != f"step_{n}":
            fail("checkpoints/latest does not name the stop's checkpoint")
        again = run_to_end(rm(launcher, 2, out, *common))
        if "rm: resuming from" not in again or f": {n} of {steps} steps done" not in again:
            fail(f"the second run did not resume from step {n}:\n{again[-2000:]}")
        same_run(reference, out, steps, f"{what} after step {n}, resumed")
    text = run_to_end(Run(launcher, 2, "sft", "inputs/sft/sort_digits.deck", [f"run.out={reference}"]), 2)
    if "a checkpoint of quartet rm, which quartet sft does not continue" not in text:
        fail(f"sft did not refuse rm's checkpoints:\n{text[-2000:]}")
    say("sft refuses to continue rm's checkpoints")


def export(run_dir, hf):
    shutil.rmtree(hf, ignore_errors=True)
    p = subprocess.run([QUARTET, "export", os.path.join(run_dir, "checkpoints", "latest"), "--out", hf],
                       capture_output=True, text=True)
    if p.returncode != 0 or "the reward, " not in p.stdout:
        fail(f"quartet export (no --role) did not export the reward model:\n{p.stdout}{p.stderr}")
    return hf


def hf_scores(hf, rows):
    """transformers' scores of each pair's chosen and rejected sides, each sequence alone, unpadded."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    model = AutoModelForSequenceClassification.from_pretrained(hf, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(hf)
    out = []
    with torch.no_grad():
        for row in rows:
            prompt = tok(row["prompt"])["input_ids"]
            side = []
            for key in ("chosen", "rejected"):
                ids = prompt + tok(row[key], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                side.append(float(model(torch.tensor([ids])).logits[0, 0]))
            out.append(side)
    return np.array(out, dtype=np.float64), model.config


def scenario_export(launcher, work):
    run_dir = os.path.join(work, "run")
    run_to_end(rm(launcher, 2, run_dir, "rm.epochs=2"))
    hf = export(run_dir, os.path.join(work, "hf"))
    _, s = series(run_dir)
    want = {k: float(s[f"eval/{k}"][-1]) for k in ("accuracy", "loss", "chosen_reward", "rejected_reward")}
    rows = [json.loads(line) for line in open(HELDOUT) if line.strip()]
    scores, config = hf_scores(hf, rows)
    if config.architectures != ["LlamaForSequenceClassification"] or config.num_labels != 1:
        fail(f"the export's config: {config.architectures}, {config.num_labels} labels")
    d = scores[:, 0] - scores[:, 1]
    got = {"accuracy": float((d > 0).mean()), "loss": float(np.logaddexp(0, -d).mean()),
           "chosen_reward": float(scores[:, 0].mean()), "rejected_reward": float(scores[:, 1].mean())}
    say(f"transformers on the export: {got}; the run's last evaluation: {want}")
    if min(abs(d)) < 1e-4:
        fail("a held-out pair's scores tie to 1e-4: the accuracy cannot be compared")
    if got["accuracy"] != want["accuracy"]:
        fail("the held-out accuracy differs")
    for k in ("loss", "chosen_reward", "rejected_reward"):
        if abs(got[k] - want[k]) > 1e-4 * max(1.0, abs(want[k])):
            fail(f"the held-out {k} differs")


def tensors(directory):
    from safetensors.numpy import load_file
    out = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(directory, f)))
    return out


def scenario_handoff(launcher, work):
    # An sft export starts the reward model: one step at a learning rate too small to move a
    # float32 weight, so the export after it holds the sft model's body as it was.
    sft_dir = os.path.join(work, "sft")
    run_to_end(Run(launcher, 2, "sft", "inputs/sft/sort_digits.deck", [f"run.out={sft_dir}", "sft.steps=16"]))
    sft_hf = os.path.join(work, "sft_hf")
    p = subprocess.run([QUARTET, "export", os.path.join(sft_dir, "checkpoints", "latest"), "--out", sft_hf],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"export of the sft run failed:\n{p.stdout}{p.stderr}")
    start = os.path.join(work, "rm_from_sft")
    text = run_to_end(rm(launcher, 2, start, f"model.reward.path={sft_hf}", "rm.steps=1", "model.reward.lr=1e-30"))
    if "starts 'score.weight' fresh" not in text:
        fail("the run did not say that the score head starts fresh")
    body, rm_model = tensors(sft_hf), tensors(export(start, os.path.join(work, "rm_from_sft_hf")))
    body.pop("lm_head.weight", None)
    if sorted(set(rm_model) - set(body)) != ["score.weight"]:
        fail(f"the reward model's tensors are the sft model's and score.weight: {sorted(set(rm_model) ^ set(body))}")
    if any(body[k].tobytes() != rm_model[k].tobytes() for k in body):
        fail("the reward model's body is not the sft export's")
    say(f"an sft export starts the reward model: {len(body)} tensors of its body bitwise, a fresh score head")
    # The rm export as train's reward model.
    run_dir = os.path.join(work, "run")
    run_to_end(rm(launcher, 2, run_dir, "rm.epochs=1"))
    hf = export(run_dir, os.path.join(work, "hf"))
    out = os.path.join(work, "train")
    text = run_to_end(Run(launcher, 2, "train", "tests/decks/train_colocated.deck",
                          [f"run.out={out}", "run.iterations=2", f"model.reward.path={hf}", "output.rollouts_every=1"]))
    if "train: done" not in text:
        fail("train did not finish")
    check_train_scores(out, hf)


def check_train_scores(out, hf):
    """train's reward scores of its rollouts are transformers' scores of them with the rm export."""
    import torch
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(hf, torch_dtype=torch.float32).eval()
    pad = model.config.pad_token_id
    compared, worst = 0, 0.0
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        if int(f.attrs["iterations_complete"]) != 2:
            fail("the train run holds other than 2 iterations")
        for it in f["rollouts"]:
            g = f["rollouts"][it]
            for s, m, score in zip(g["sequences"][()], g["attention_mask"][()], g["scores"][()]):
                real = torch.from_numpy(s[m.astype(bool)]).unsqueeze(0)
                if int(real[0, -1]) == pad:  # transformers would look for an earlier last token
                    continue
                with torch.no_grad():
                    hf_score = float(model(input_ids=real).logits[0, 0])
                worst = max(worst, abs(hf_score - float(score)) / max(abs(hf_score), 1e-3))
                compared += 1
    say(f"train's scores of {compared} rollouts are transformers' with the rm export (max relative error {worst:.2e})")
    if compared < 6 or worst > 1e-4:
        fail("train's reward scores are not the rm export's")


def main():
    global QUARTET, WORK
    args = sys.argv[1:]
    split = args.index("--")
    work, scenario = args[:split]
    command = args[split + 1:]
    launcher, QUARTET = command[:-1], command[-1]
    use("check_rm", QUARTET, "reward")
    WORK = work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"learn": scenario_learn, "resume": scenario_resume, "export": scenario_export,
     "handoff": scenario_handoff}[scenario](launcher, work)
    say("passed")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
