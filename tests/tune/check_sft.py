"""`quartet sft` end to end, on inputs/sft/sort_digits.deck (run from the repository root).

    check_sft.py WORKDIR SCENARIO -- MPIRUN... -np QUARTET
SCENARIO:
  learn    the training loss falls and the held-out loss falls while its token accuracy and greedy
           exact match rise (/eval at step 0 and every eval_every steps); the step's loss and
           gradient are the same on 1 rank as on 2 (the same rows, split and micro-batched
           otherwise), by sequences or by tokens per micro-batch
  resume   SIGUSR1 to every rank, SIGTERM to one rank, and a short run.time_limit: exit 75 with
           a checkpoint; the resumed runs equal the uninterrupted one bitwise (metrics, /eval, final weights and
           optimizer state); a checkpoint of sft is not resumed by train, nor train's by sft
  export   `quartet export` of the final checkpoint loads in transformers, whose loss, token
           accuracy and greedy exact match on the held-out rows are the run's last evaluation
  handoff  `quartet train` starts its actor from that export: its greedy pass@1 on the held-out
           prompts before its first iteration is the sft run's final exact match
"""
import os
import re
import shutil
import signal
import subprocess
import sys

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_check import (EXIT_RESUBMIT, Run, fail, run_to_end, same_run, say, series, stage,  # noqa: E402
                         time_limited_rounds, use)

DECK = "inputs/sft/sort_digits.deck"
HELDOUT = "inputs/prompts/sort_digits_heldout.jsonl"


def sft(launcher, np_, out, *sets):
    return stage("sft", DECK, launcher, np_, out, *sets)


def stopped_at(output):
    m = re.search(r"sft: stopping after step (\d+)", output)
    if not m:
        fail(f"no 'stopping after step' line:\n{output[-3000:]}")
    return int(m.group(1))


def scenario_learn(launcher, work):
    out = os.path.join(work, "learn")
    run_to_end(sft(launcher, 2, out, "sft.eval_at_start=true"))
    n, s = series(out)
    loss = s["loss"]
    first, last = loss[:8].mean(), loss[-8:].mean()
    say(f"training loss {first:.3f} over the first 8 steps, {last:.3f} over the last 8 ({n} steps)")
    if not last < 0.5 * first:
        fail(f"the training loss did not fall by half: {first:.4f} -> {last:.4f}")
    steps = list(s["eval/iteration"])
    if steps != [0, 32, 64, 96, 128]:
        fail(f"evaluations at steps {steps}, expected 0, 32, 64, 96, 128")
    hl, acc, em = s["eval/loss"], s["eval/token_accuracy"], s["eval/exact_match"]
    say(f"held-out loss {hl[0]:.3f} -> {hl[-1]:.3f}, token accuracy {acc[0]:.3f} -> {acc[-1]:.3f}, "
        f"exact match {em[0]:.3f} -> {em[-1]:.3f}")
    if not (hl[-1] < 0.5 * hl[0] and acc[-1] > acc[0] + 0.3 and em[-1] >= em[0] + 0.1):
        fail("the held-out numbers did not improve enough (loss halved, token accuracy +0.3, exact match +0.1)")
    if list(s["eval/rows"]) != [64] * 5:
        fail(f"evaluated {s['eval/rows']} rows, expected all 64 held-out rows each time")
    # One step, 32 rows: 2 ranks x 16 (micro-batches of 16 sequences), 1 rank x 32 (micro-batches
    # of 5 sequences, or of at most 96 tokens).
    firsts = {}
    for name, np_, sets in [("2x16", 2, []),
                            ("1x32", 1, ["placement.actor=1", "sft.batch=32", "train.micro_batch=5"]),
                            ("1x32_tokens", 1, ["placement.actor=1", "sft.batch=32", "sft.micro_batch_tokens=96"])]:
        d = os.path.join(work, "one_step_" + name)
        run_to_end(sft(launcher, np_, d, "sft.steps=1", *sets))
        _, m = series(d)
        firsts[name] = (float(m["loss"][0]), float(m["grad_norm"][0]), float(m["units"][0]))
    ref = firsts["2x16"]
    for name, (loss0, norm0, units0) in firsts.items():
        if units0 != ref[2] or abs(loss0 - ref[0]) > 1e-5 * ref[0] or abs(norm0 - ref[1]) > 1e-5 * ref[1]:
            fail(f"the first step on {name} (loss {loss0}, grad norm {norm0}, {units0} targets) is not the one on "
                 f"2x16 (loss {ref[0]}, grad norm {ref[1]}, {ref[2]} targets)")
    say(f"the first step's loss {ref[0]:.6f} and gradient norm {ref[1]:.6f} are the same on 2 ranks x 16 rows and "
        "1 rank x 32 rows, by sequences and by tokens")


def scenario_resume(launcher, work):
    steps = 96
    common = [f"sft.steps={steps}", "checkpoint.every=16", "sft.eval_every=20", "sft.eval_count=16"]
    reference = os.path.join(work, "uninterrupted")
    reference_output = run_to_end(sft(launcher, 2, reference, *common))
    for what, how in [("SIGUSR1 to every rank", "all"), ("SIGTERM to rank 1 alone", "one")]:
        out = os.path.join(work, how)
        r = sft(launcher, 2, out, *common)
        r.wait_for_step(30)
        ranks = r.ranks()
        if len(ranks) != 2:
            fail(f"expected 2 rank processes, found {ranks}")
        for pid in (ranks if how == "all" else ranks[-1:]):
            os.kill(pid, signal.SIGUSR1 if how == "all" else signal.SIGTERM)
        output = run_to_end(r, EXIT_RESUBMIT)
        n = stopped_at(output)
        if os.readlink(os.path.join(out, "checkpoints", "latest")) != f"step_{n}":
            fail("checkpoints/latest does not name the stop's checkpoint")
        again = run_to_end(sft(launcher, 2, out, *common))
        if f"sft: resuming from" not in again or f": {n} of {steps} steps done" not in again:
            fail(f"the second run did not resume from step {n}:\n{again[-2000:]}")
        same_run(reference, out, steps, f"{what} after step {n}, resumed")
    # A time limit shorter than the run: checkpoint and exit 75 each round, until it is done.
    # Half the uninterrupted run's own time (machines differ several-fold).
    out = os.path.join(work, "time_limit")
    limit, rounds = time_limited_rounds(lambda limit: sft(launcher, 2, out, *common, f"run.time_limit={limit:.2f}"),
                                        out, r"^sft: done in ([0-9.]+)s$", reference_output, fail, 40)
    same_run(reference, out, steps, f"run.time_limit = {limit:.2f} s ({rounds} rounds)")
    # A checkpoint of one stage is not another's.
    r = Run(launcher, 3, "train", "inputs/demo.deck", [f"run.out={reference}", "run.iterations=2"])
    text = run_to_end(r, 2)
    if "a checkpoint of quartet sft, which quartet train does not continue" not in text:
        fail(f"train did not refuse sft's checkpoints:\n{text[-2000:]}")
    train_out = os.path.join(work, "train_run")
    run_to_end(Run(launcher, 3, "train", "inputs/demo.deck", [f"run.out={train_out}", "run.iterations=1"]))
    text = run_to_end(sft(launcher, 2, train_out), 2)
    if "a checkpoint of quartet train, which quartet sft does not continue" not in text:
        fail(f"sft did not refuse train's checkpoints:\n{text[-2000:]}")
    say("train refuses to continue sft's checkpoints, and sft train's")


def export(work):
    run_dir = os.path.join(work, "run")
    hf = os.path.join(work, "hf")
    shutil.rmtree(hf, ignore_errors=True)
    p = subprocess.run([QUARTET, "export", os.path.join(run_dir, "checkpoints", "latest"), "--out", hf],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"quartet export failed:\n{p.stdout}{p.stderr}")
    return run_dir, hf


def scenario_export(launcher, work):
    import json
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    run_dir = os.path.join(work, "run")
    run_to_end(sft(launcher, 2, run_dir, "sft.epochs=4"))
    _, hf = export(work)
    _, s = series(run_dir)
    want = {k: float(s[f"eval/{k}"][-1]) for k in ("loss", "token_accuracy", "exact_match")}
    model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(hf)
    nll = correct = targets = exact = 0.0
    rows = [json.loads(line) for line in open(HELDOUT) if line.strip()]
    with torch.no_grad():
        for row in rows:
            prompt = tok(row["prompt"])["input_ids"]
            response = tok(row["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            ids = torch.tensor([prompt + response])
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
            for t in range(len(prompt), ids.shape[1]):
                nll -= logp[t - 1, ids[0, t]].item()
                correct += float(logp[t - 1].argmax().item() == ids[0, t].item())
                targets += 1
            g = model.generate(torch.tensor([prompt]), max_new_tokens=len(response), do_sample=False,
                               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(prompt):].tolist()
            exact += float(g[:g.index(tok.eos_token_id) + 1] == response if tok.eos_token_id in g else False)
    got = {"loss": nll / targets, "token_accuracy": correct / targets, "exact_match": exact / len(rows)}
    say(f"transformers on the export: {got}; the run's last evaluation: {want}")
    if abs(got["loss"] - want["loss"]) > 1e-4 * want["loss"]:
        fail("the held-out loss differs")
    for k in ("token_accuracy", "exact_match"):
        if abs(got[k] - want[k]) > 1e-12:
            fail(f"the held-out {k} differs")


def scenario_handoff(launcher, work):
    run_dir = os.path.join(work, "run")
    run_to_end(sft(launcher, 2, run_dir, "sft.epochs=4"))
    _, hf = export(work)
    _, s = series(run_dir)
    exact = float(s["eval/exact_match"][-1])
    out = os.path.join(work, "train")
    text = run_to_end(Run(launcher, 3, "train", "inputs/demo.deck",
                          [f"run.out={out}", "run.iterations=2", f"model.actor.path={hf}", f"eval.prompts={HELDOUT}",
                           "eval.at_start=true", "eval.at_end=false", "eval.every=0"]))
    if "train: done" not in text:
        fail("train did not finish")
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        its, passed = list(f["eval/iteration"][()]), float(f["eval/greedy_pass@1"][0])
    if its != [0]:
        fail(f"train evaluated at {its}, expected iteration 0 alone")
    say(f"train's actor from the export: greedy pass@1 {passed:.4f} before its first iteration; sft's final exact "
        f"match {exact:.4f}")
    if abs(passed - exact) > 1e-12 or exact == 0:
        fail("the train run's actor does not start where sft left it")


def main():
    global QUARTET
    args = sys.argv[1:]
    split = args.index("--")
    work, scenario = args[:split]
    command = args[split + 1:]
    launcher, QUARTET = command[:-1], command[-1]
    use("check_sft", QUARTET, "actor")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"learn": scenario_learn, "resume": scenario_resume, "export": scenario_export,
     "handoff": scenario_handoff}[scenario](launcher, work)
    say("passed")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
