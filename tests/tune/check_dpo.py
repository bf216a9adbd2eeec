"""`quartet dpo` end to end, on inputs/dpo/sort_digits.deck (run from the repository root).

    check_dpo.py WORKDIR SCENARIO -- MPIRUN... -np QUARTET
SCENARIO:
  learn      the training loss falls from log 2, and on the held-out pairs the loss falls while the
             reward accuracy rises from 0 (/eval at step 0 and every eval_every steps)
  placement  the reference on a rank of its own (3 ranks) and colocated with the actor (2 ranks)
             give the same run bitwise (every series, /eval, the final weights)
  resume     SIGUSR1 to every rank: exit 75 with a checkpoint; the resumed run equals the
             uninterrupted one bitwise (metrics, /eval, final weights and optimizer state)
  handoff    an SFT run's export as model.actor.path and model.reference.path: the held-out
             numbers before the first step are transformers' on the export (loss log 2, rewards 0);
             with an earlier export as the reference, the first step's loss and the held-out
             numbers equal a torch computation of DPO (sigmoid, cDPO and IPO) on the two exports
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_check import EXIT_RESUBMIT, Run, fail, run_to_end, same_run, say, series, stage, use  # noqa: E402

DECK = "inputs/dpo/sort_digits.deck"
SFT_DECK = "inputs/sft/sort_digits.deck"
HELDOUT = "tests/tune/data/sort_digits_pairs_heldout.jsonl"
COLOCATED = ["placement.mode=colocated", "placement.actor=2", "placement.reference=2", "placement.critic=0",
             "placement.reward=0"]


def dpo(launcher, np_, out, *sets):
    return stage("dpo", DECK, launcher, np_, out, *sets)


def scenario_learn(launcher, work):
    out = os.path.join(work, "learn")
    run_to_end(dpo(launcher, 3, out))
    n, s = series(out)
    loss = s["loss"]
    say(f"training loss {loss[0]:.4f} at the first step, {loss[-4:].mean():.4f} over the last 4 ({n} steps)")
    if abs(loss[0] - math.log(2)) > 1e-5:
        fail(f"the first step's loss is {loss[0]}, not log 2: the policy starts as the reference")
    if not loss[-4:].mean() < 0.6 * math.log(2):
        fail("the training loss did not fall below 0.6 log 2")
    steps = list(s["eval/iteration"])
    if steps[0] != 0 or steps[-1] != n or len(steps) < 3:
        fail(f"evaluations at steps {steps}, expected 0, every eval_every steps and {n}")
    hl, acc = s["eval/loss"], s["eval/reward_accuracy"]
    say(f"held-out loss {hl[0]:.4f} -> {hl[-1]:.4f}, reward accuracy {acc[0]:.3f} -> {acc[-1]:.3f}, "
        f"margin {s['eval/reward_margin'][0]:.3f} -> {s['eval/reward_margin'][-1]:.3f}")
    if not (acc[0] == 0 and acc[-1] >= 0.8 and hl[-1] < 0.5 * hl[0]):
        fail("the held-out numbers did not improve enough (reward accuracy 0 -> 0.8, loss halved)")
    if list(s["eval/pairs"]) != [64] * len(steps):
        fail(f"evaluated {s['eval/pairs']} pairs, expected all 64 held-out pairs each time")


def scenario_placement(launcher, work):
    # 40 held-out pairs: 3 chunks of 16, so one rank of two takes a turn without pairs
    common = ["dpo.steps=12", "dpo.eval_every=6", "dpo.eval_count=40", "checkpoint.every=0"]
    disjoint, colocated = os.path.join(work, "disjoint"), os.path.join(work, "colocated")
    text = run_to_end(dpo(launcher, 3, disjoint, *common))
    if "reference rank 2" not in text:
        fail("the disjoint run did not place the reference on rank 2")
    text = run_to_end(dpo(launcher, 2, colocated, *common, *COLOCATED))
    if "colocated: actor ranks 0-1 | reference ranks 0-1" not in text:
        fail("the colocated run did not place actor and reference on ranks 0-1")
    same_run(disjoint, colocated, 12, "the reference on its own rank and colocated")


def scenario_resume(launcher, work):
    steps = 48
    common = [f"dpo.steps={steps}", "checkpoint.every=8", "dpo.eval_every=10", "dpo.eval_count=16"]
    reference = os.path.join(work, "uninterrupted")
    run_to_end(dpo(launcher, 3, reference, *common))
    out = os.path.join(work, "signalled")
    r = dpo(launcher, 3, out, *common)
    r.wait_for_step(12)
    ranks = r.ranks()
    if len(ranks) != 3:
        fail(f"expected 3 rank processes, found {ranks}")
    for pid in ranks:
        os.kill(pid, signal.SIGUSR1)
    output = run_to_end(r, EXIT_RESUBMIT)
    m = re.search(r"dpo: stopping after step (\d+)", output)
    if not m:
        fail(f"no 'stopping after step' line:\n{output[-3000:]}")
    n = int(m.group(1))
    if n >= steps:
        fail(f"the run stopped at step {n}, at its end: nothing was resumed")
    again = run_to_end(dpo(launcher, 3, out, *common))
    if "dpo: resuming from" not in again or f": {n} of {steps} steps done" not in again:
        fail(f"the second run did not resume from step {n}:\n{again[-2000:]}")
    same_run(reference, out, steps, f"SIGUSR1 after step {n}, resumed")
    text = run_to_end(Run(launcher, 2, "sft", SFT_DECK, [f"run.out={reference}", "sft.steps=60"]), 2)
    if "a checkpoint of quartet dpo, which quartet sft does not continue" not in text:
        fail(f"sft did not refuse dpo's checkpoints:\n{text[-2000:]}")
    say("sft refuses to continue dpo's checkpoints")


def export(checkpoint, hf):
    shutil.rmtree(hf, ignore_errors=True)
    p = subprocess.run([QUARTET, "export", checkpoint, "--out", hf], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"quartet export failed:\n{p.stdout}{p.stderr}")
    return hf


def torch_dpo(policy_dir, reference_dir, pairs, loss, beta, eps):
    """DPO's numbers over `pairs`, each side alone through transformers (TRL's conventions)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(policy_dir)
    models = [AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
              for d in (policy_dir, reference_dir)]

    def logp(model, prompt, response):
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            lp = torch.log_softmax(model(ids).logits[0].double(), -1)
        t = [lp[len(prompt) + k - 1, response[k]] for k in range(len(response))]
        s = torch.stack(t).sum()
        return s / len(response) if loss == "ipo" else s

    rows = []
    for p in pairs:
        prompt = tok(p["prompt"])["input_ids"]
        sides = [tok(p[k], add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for k in ("chosen", "rejected")]
        rows.append([[logp(m, prompt, r) for r in sides] for m in models])
    lp = torch.tensor([[[float(v) for v in side] for side in row] for row in rows], dtype=torch.float64)
    pc, pr, rc, rr = lp[:, 0, 0], lp[:, 0, 1], lp[:, 1, 0], lp[:, 1, 1]
    h = (pc - rc) - (pr - rr)
    if loss == "ipo":
        per = (h - 1 / (2 * beta)) ** 2
    else:
        F = torch.nn.functional
        per = -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return {"loss": per.mean().item(), "reward_accuracy": (chosen > rejected).double().mean().item(),
            "chosen_reward": chosen.mean().item(), "rejected_reward": rejected.mean().item(),
            "reward_margin": (chosen - rejected).mean().item(), "chosen_logp": pc.mean().item(),
            "rejected_logp": pr.mean().item()}


def close(got, want, what):
    for k, w in want.items():
        g = got[k]
        if k == "reward_accuracy":
            ok = g == w
        else:
            ok = abs(g - w) <= 1e-4 * max(1.0, abs(w))
        if not ok:
            fail(f"{what}: {k} is {g}, transformers gives {w}")


def scenario_handoff(launcher, work):
    sft_out = os.path.join(work, "sft")
    run_to_end(Run(launcher, 2, "sft", SFT_DECK, [f"run.out={sft_out}", "sft.steps=48", "checkpoint.every=24",
                                                   "sft.eval_every=0", "sft.heldout="]))
    early = export(os.path.join(sft_out, "checkpoints", "step_24"), os.path.join(work, "hf_early"))
    late = export(os.path.join(sft_out, "checkpoints", "step_48"), os.path.join(work, "hf_late"))
    pairs = [json.loads(line) for line in open(HELDOUT) if line.strip()]
    # The export as actor and reference: the policy starts as the reference.
    out = os.path.join(work, "same")
    run_to_end(dpo(launcher, 3, out, f"model.actor.path={late}", f"model.reference.path={late}", "dpo.steps=1",
                   "dpo.eval_every=0"))
    _, s = series(out)
    got = {k[len("eval/"):]: float(v[0]) for k, v in s.items() if k.startswith("eval/")}
    want = torch_dpo(late, late, pairs, "sigmoid", 0.1, 0.0)
    say(f"the SFT export as actor and reference: held-out {got}; transformers {want}")
    if abs(got["loss"] - math.log(2)) > 1e-6 or got["reward_accuracy"] != 0 or got["chosen_reward"] != 0:
        fail("the policy does not start as the reference")
    close(got, want, "the SFT export as actor and reference")
    # An earlier export as the reference; the held-out pairs as the training data, all of them in
    # the first step (2 ranks x 32), so the step's loss is transformers' over the same pairs.
    for loss, beta, eps in [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.2), ("ipo", 0.3, 0.0)]:
        out = os.path.join(work, f"two_{loss}_{eps}")
        run_to_end(dpo(launcher, 3, out, f"model.actor.path={late}", f"model.reference.path={early}",
                       f"dpo.data={HELDOUT}", "dpo.batch=32", "dpo.steps=1", "dpo.eval_every=0", f"dpo.loss={loss}",
                       f"dpo.beta={beta}", f"dpo.label_smoothing={eps}"))
        _, s = series(out)
        want = torch_dpo(late, early, pairs, loss, beta, eps)
        evals = {k[len("eval/"):]: v for k, v in s.items() if k.startswith("eval/")}
        if list(evals["iteration"]) != [0, 1]:
            fail(f"{loss}: evaluations at {list(evals['iteration'])}, expected 0 and 1")
        got_eval = {k: float(v[0]) for k, v in evals.items()}
        got_step = {k: float(s[k][0]) for k in want}
        say(f"{loss} beta {beta} eps {eps}: step 1 {got_step}; transformers {want}")
        close(got_step, want, f"{loss} (beta {beta}, eps {eps}): the first step")
        close(got_eval, want, f"{loss} (beta {beta}, eps {eps}): the held-out pairs before the first step")
        # The evaluation after the step sees the updated policy, on the pairs it was trained on.
        if not float(evals["loss"][1]) < got_eval["loss"]:
            fail(f"{loss}: the loss after the step ({float(evals['loss'][1])}) is not below the one before")


def main():
    global QUARTET
    args = sys.argv[1:]
    split = args.index("--")
    work, scenario = args[:split]
    command = args[split + 1:]
    launcher, QUARTET = command[:-1], command[-1]
    use("check_dpo", QUARTET, "actor")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"learn": scenario_learn, "placement": scenario_placement, "resume": scenario_resume,
     "handoff": scenario_handoff}[scenario](launcher, work)
    say("passed")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
