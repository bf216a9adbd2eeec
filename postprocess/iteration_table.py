#!/usr/bin/env python3
"""Where a `quartet train` iteration's time goes, phase by phase, against the GPU's limits.

    python3 postprocess/iteration_table.py RUN.h5 --config CONFIG.json [--skip 1]
        [--peak-tflops 790] [--hbm-tbs 4.3] [--markdown]

One row per part of the iteration, averaged over the iterations after the first --skip that
have rollouts in the run file (output.rollouts_every = 1): their lengths give the work.
- decode: generation proper (the time_decode metric). Against the decode roofline: each forward
  pass (decode_steps) reads every weight once, each row's step reads the keys and values of its
  tokens so far, at --hbm-tbs; the prompts' pass counts its FLOPs at --peak-tflops.
- old log-probs: the rest of the generate phase (the actor's pass over the rollouts);
- score: the score phase (the reference's pass; rule rewards);
- train: the train phase (the actor's forward and backward, algorithm.epochs times).
The passes are counted in model FLOPs (MFU): the blocks' matrices on every real token (2 per
parameter forward, 6 forward and backward), the LM head on the tokens whose logits are taken
(every answer token, and the prompt's last), attention as PaLM counts it (4 L h n FLOPs a token
forward, n its sequence's length, 12 with backward). Padding is work the pass did not need:
it counts nothing. CONFIG is the actor's config.json (Llama-shaped), which the reference shares.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402

GIB = float(1 << 30)
HEADER = ["part", "seconds", "tokens", "tokens/s", "bound", "against the limit", "peak GiB"]


def model_sizes(cfg):
    """(parameters in the blocks and final norm, embedding parameters, head parameters, bytes
    per cached token's keys and values over all layers in bf16)."""
    h, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", h // heads)
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2
    blocks = layers * (attention + 3 * h * cfg["intermediate_size"] + 2 * h) + h
    return blocks, vocab * h, vocab * h, 2 * layers * kv * head_dim * 2


def work(rollout):
    """Per row: prompt tokens, answer tokens (numpy int arrays)."""
    answer = rollout["action_mask"].sum(1).astype(np.int64)
    prompt = rollout["attention_mask"].sum(1).astype(np.int64) - answer
    return prompt, answer


def forward_flops(cfg, prompt, answer):
    """Model FLOPs of one forward over the rows, logits at the answers (and the prompt's last)."""
    blocks, _, head, _ = model_sizes(cfg)
    n = prompt + answer
    attention = 4.0 * cfg["num_hidden_layers"] * cfg["hidden_size"] * float((n.astype(np.float64) ** 2).sum())
    return 2.0 * blocks * n.sum() + 2.0 * head * (answer + 1).sum() + attention


def decode_floor(cfg, prompt, answer, steps, hbm, peak):
    """Seconds the decode cannot beat: weights read once a pass, each row's cache read once a
    step, the prompts' pass at peak FLOPs."""
    blocks, embed, head, kv_token = model_sizes(cfg)
    weights = 2.0 * (blocks + embed + head)
    later = np.maximum(answer - 1, 0).astype(np.float64)  # steps after the prompt's pass gave the first
    cached = (later * prompt + later * (later + 1) / 2).sum()
    prefill = 2.0 * (blocks + head) * prompt.sum() + 4.0 * cfg["num_hidden_layers"] * cfg["hidden_size"] * float(
        (prompt.astype(np.float64) ** 2).sum())
    return (steps * weights + cached * kv_token) / hbm + prefill / peak


def table(path, cfg, skip, peak, hbm):
    run = quartet_run.open_run(path)
    iterations = [i for i in run.rollout_iterations() if i > skip]
    if not iterations:
        raise quartet_run.RunFileError(f"{path}: no rollouts after iteration {skip} (output.rollouts_every = 1)")
    index = {int(it): k for k, it in enumerate(run.iterations)}
    rows = [index[i] for i in iterations]

    def phase(name):
        return run.timing(name).max(axis=1)[rows] if name in run.timing_phases() else run.metric(f"time_{name}")[rows]

    def peak_of(name):
        return float(run.memory(name)[rows].max()) / GIB if name in run.memory_phases() else float("nan")

    decode_s, generate_s = run.metric("time_decode")[rows], phase("generate")
    steps = run.metric("decode_steps")[rows]
    parts = {k: [] for k in ("decode", "old", "score", "train", "new", "all", "fwd")}
    for k, i in enumerate(iterations):
        prompt, answer = work(run.rollout(i))
        parts["new"].append(answer.sum())
        parts["all"].append((prompt + answer).sum())
        parts["fwd"].append(forward_flops(cfg, prompt, answer))
        parts["decode"].append(decode_floor(cfg, prompt, answer, steps[k], hbm, peak))
    epochs = float(run.deck().get("algorithm.epochs", 1))
    mean = lambda v: float(np.mean(v))  # noqa: E731
    fwd, tokens, new = mean(parts["fwd"]), mean(parts["all"]), mean(parts["new"])
    old_s, score_s, train_s = mean(generate_s - decode_s), mean(phase("score")), mean(phase("train"))
    out = [["decode", mean(decode_s), new, new / mean(decode_s), "HBM (decode roofline)",
            f"{100 * mean(parts['decode']) / mean(decode_s):.1f}%", peak_of("generate")]]
    out.append(["old log-probs", old_s, tokens, tokens / old_s, "FLOPs (MFU)", f"{100 * fwd / old_s / peak:.1f}%",
                peak_of("generate")])
    out.append(["score", score_s, tokens, tokens / score_s, "FLOPs (MFU)", f"{100 * fwd / score_s / peak:.1f}%",
                peak_of("score")])
    out.append(["train", train_s, tokens * epochs, tokens * epochs / train_s, "FLOPs (MFU)",
                f"{100 * 3 * fwd * epochs / train_s / peak:.1f}%", peak_of("train")])
    iteration_s = mean(phase("generate")) + score_s + mean(phase("advantages")) + train_s
    out.append(["iteration (phases)", iteration_s, tokens, tokens / iteration_s, "", "", max(r[-1] for r in out)])
    return out, len(iterations)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--config", required=True, help="the actor's config.json")
    ap.add_argument("--skip", type=int, default=1, help="leave out the first N iterations (default 1)")
    ap.add_argument("--peak-tflops", type=float, default=790.0, help="bf16 FLOP/s a GPU, in TFLOP/s (one H200, measured)")
    ap.add_argument("--hbm-tbs", type=float, default=4.3, help="memory bandwidth, TB/s (one H200, measured)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    try:
        with open(args.config) as f:
            cfg = json.load(f)
        model_sizes(cfg)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise quartet_run.RunFileError(f"{args.config}: not a readable model config.json ({e!r})") from None
    rows, n = table(args.run, cfg, args.skip, args.peak_tflops * 1e12, args.hbm_tbs * 1e12)
    text = [[r[0], f"{r[1]:.2f}", f"{r[2]:,.0f}", f"{r[3]:,.0f}", r[4], r[5], f"{r[6]:.2f}"] for r in rows]
    print(f"{args.run}: {n} iteration(s) after the first {args.skip}")
    if args.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "|".join("---" if k < 1 or k == 4 else "---:" for k in range(len(HEADER))) + "|")
        for r in text:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(HEADER[k]), *(len(r[k]) for r in text)) for k in range(len(HEADER))]
        print("  ".join(HEADER[k].ljust(widths[k]) for k in range(len(HEADER))))
        for r in text:
            print("  ".join(r[k].ljust(widths[k]) for k in range(len(HEADER))))
    return 0


if __name__ == "__main__":
    sys.exit(quartet_run.cli_main("iteration_table.py", main))
