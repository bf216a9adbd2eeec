#!/usr/bin/env python3
"""Throughput, MFU and peak memory of `quartet sft`, `rm` and `dpo` runs: one row per run.

    python3 postprocess/stage_table.py RUN.h5:KIND [RUN.h5:KIND ...] --config CONFIG.json
        [--seq T] [--gpus N] [--skip 2] [--peak-tflops 790] [--markdown]

KIND is sft, rm or dpo: it says which head the trained model carries (sft and dpo: the language
model head; rm: the one-output score head), so which parameters count. MFU counts 6 N + 12 L h T
FLOPs a trained token (PaLM's formula, as bench/train_bench does: N every parameter of the trained
model, T the sequence length, --seq) over the step's training time (the step's wall time less any
evaluation), against --peak-tflops a GPU (bf16 on one H200, measured). Tokens are the tokens the
step trained: in dpo the policy's chosen and rejected sides (the reference's log-probs are
computed once before the first step and are not in the step's time).

--skip N leaves out the first N steps (default 2: allocations and first-call costs). Peak memory
is the largest /memory entry of any rank and step part, against the plan's largest.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quartet_run  # noqa: E402

GIB = float(1 << 30)
HEADER = ["run", "command", "steps", "s/step", "tokens/step", "tokens/s", "MFU %", "peak GiB", "plan GiB"]


def parameter_count(cfg, kind):
    """Parameters of a Llama-shaped model (config.json keys) with the head `kind` trains."""
    h, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", h // heads)
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2
    per_layer = attention + 3 * h * cfg["intermediate_size"] + 2 * h
    head = h if kind == "rm" else vocab * h
    return vocab * h + layers * per_layer + h + head


def row(path, kind, cfg, seq, gpus, skip, peak_flops):
    run = quartet_run.open_run(path)
    steps = len(run.iterations)
    rows = np.arange(skip, steps) if steps > skip else np.arange(steps)
    tokens = run.metric("tokens")[rows]
    step_s = run.metric("time_step")[rows]
    train_s = step_s - (run.timing("eval").max(axis=1)[rows] if "eval" in run.timing_phases() else 0.0)
    rate = tokens.sum() / train_s.sum()
    flops = 6.0 * parameter_count(cfg, kind) + 12.0 * cfg["num_hidden_layers"] * cfg["hidden_size"] * seq
    peak = max(float(run.memory(p).max()) for p in run.memory_phases() if p != "plan") if run.memory_phases() else float("nan")
    plan = float(np.max(run.memory_plan())) if len(run.memory_plan()) else float("nan")
    return [os.path.basename(os.path.dirname(os.path.abspath(path))), kind, str(len(rows)),
            f"{step_s.mean():.4f}", f"{tokens.mean():.0f}", f"{rate:.0f}", f"{100 * rate * flops / (peak_flops * gpus):.1f}",
            f"{peak / GIB:.2f}", f"{plan / GIB:.2f}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="RUN.h5:KIND, KIND one of sft, rm, dpo")
    ap.add_argument("--config", required=True, help="the trained model's config.json")
    ap.add_argument("--seq", type=int, required=True, help="sequence length T of the attention term")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs of each run (default 1)")
    ap.add_argument("--skip", type=int, default=2, help="first steps left out (default 2)")
    ap.add_argument("--peak-tflops", type=float, default=790.0, help="bf16 peak a GPU (default 790: one H200)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    table = []
    for spec in a.runs:
        path, sep, kind = spec.rpartition(":")
        if not sep or kind not in ("sft", "rm", "dpo"):
            ap.error(f"'{spec}': give each run as RUN.h5:KIND, KIND one of sft, rm, dpo")
        try:
            table.append(row(path, kind, cfg, a.seq, a.gpus, a.skip, a.peak_tflops * 1e12))
        except (quartet_run.RunFileError, KeyError) as e:
            sys.exit(f"stage_table.py: {path}: {e}")
    if a.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for r in table:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(x) for x in col) for col in zip(HEADER, *table)]
    for r in [HEADER] + table:
        print("  ".join(x.rjust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
