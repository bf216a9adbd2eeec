"""A trained checkpoint, exported, loads in Hugging Face transformers and computes what quartet
computes: for the GPU machine, on real-size models (bench/gpu_checkpoint_check.sh).

    python export_matches_hf.py --quartet BIN --checkpoint STEP_DIR --export DIR [--role actor]
                                [--device cuda|cpu] [--mpirun 'mpirun|-np|1']

1. The exported weights (safetensors, read by transformers) equal the checkpoint's
   `model/<name>` datasets bit for bit.
2. `quartet generate --logits` on the exported directory (bfloat16, on the device) against
   AutoModelForCausalLM on the same ids, bf16 and then fp32:
       err(quartet bf16 vs HF fp32) <= max(3e-2, 1.5 * err(HF bf16 vs HF fp32))
   (the criterion of tests/gpu/gptj6b_matches_hf.py).
3. AutoTokenizer loads the exported tokenizer and encodes the prompts as quartet did.
Exit status 0 pass, 1 fail, 77 skipped (--device cuda without a CUDA device).
"""
import argparse
import json
import os
import subprocess
import sys

SKIP = 77
BF16_FLOOR, BF16_VS_HF = 3e-2, 1.5
PROMPTS = ["sort 3817=", "sort 90210=", "add 12+30=", "x"]


def log(msg):
    print(f"export_matches_hf: {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quartet", required=True)
    ap.add_argument("--checkpoint", required=True, help="the step_<N> directory that was exported")
    ap.add_argument("--export", required=True, help="the directory `quartet export` wrote")
    ap.add_argument("--role", default="actor")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--mpirun", default="")
    args = ap.parse_args()

    import h5py
    import numpy as np
    import torch
    import transformers as tf

    if args.device == "cuda" and not torch.cuda.is_available():
        log("no CUDA device: skipped")
        return SKIP
    ok = True

    # 1. Weights, bit for bit (bf16 datasets are read through HDF5's conversion to float32,
    #    which is exact for bfloat16; so is the comparison in float32).
    model = tf.AutoModelForCausalLM.from_pretrained(args.export, dtype="auto").to(args.device).eval()
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    with h5py.File(os.path.join(args.checkpoint, f"{args.role}.h5"), "r") as f:
        names = sorted(f["model"].keys())
        for name in names:
            saved = f["model"][name].astype("f4")[()]
            if name not in state:
                log(f"FAIL {name} is in the checkpoint but not in the loaded model")
                ok = False
            elif not np.array_equal(saved, state[name]):
                log(f"FAIL {name} differs between the checkpoint and the export")
                ok = False
    extra = sorted(set(state) - set(names) - {"lm_head.weight"} if model.config.tie_word_embeddings else set(state) - set(names))
    if extra:
        log(f"FAIL the loaded model has tensors the checkpoint lacks: {extra[:5]}")
        ok = False
    log(f"{len(names)} tensors of {model.num_parameters():,} parameters, dtype {model.dtype}: "
        f"{'equal to the checkpoint' if ok else 'MISMATCH'}")

    # 2. quartet generate --logits on the export.
    work = os.path.join(os.path.dirname(os.path.abspath(args.export)), "export-check")
    os.makedirs(work, exist_ok=True)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}) + "\n")
    deck = os.path.join(work, "export.deck")
    with open(deck, "w") as f:
        f.write(f"[run]\nseed = 1\n[placement]\nactor = 1\n[dist]\ndevice = {args.device}\n"
                f"[model.actor]\ndtype = bfloat16\n[rollout]\nbatch = {len(PROMPTS)}\nmax_new_tokens = 4\ntemperature = 0\n")
    h5 = os.path.join(work, "logits.h5")
    cmd = ([w for w in args.mpirun.split("|") if w]) + [
        args.quartet, "generate", deck, "--set", f"model.actor.path={args.export}",
        "--set", f"rollout.prompts={prompts}", "--set", f"run.out={work}", "--logits", h5]
    log("running " + " ".join(cmd))
    if subprocess.call(cmd) != 0:
        log("FAIL quartet generate failed")
        return 1
    with h5py.File(h5, "r") as f:
        ids = torch.from_numpy(f["input_ids"][...])
        mask = torch.from_numpy(f["attention_mask"][...])
        ours = torch.from_numpy(f["logits"][...]).float()
    real = mask.bool()

    # 3. The tokenizer.
    tok = tf.AutoTokenizer.from_pretrained(args.export)
    for b, p in enumerate(PROMPTS):
        want = tok(p).input_ids
        got = ids[b][real[b]].tolist()
        if got != want:
            log(f"FAIL prompt {p!r}: quartet's ids {got} != AutoTokenizer's {want}")
            ok = False

    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        kw = dict(input_ids=ids.to(args.device), attention_mask=mask.to(args.device), position_ids=pos.to(args.device))
        model.to(torch.bfloat16)
        hf16 = model(**kw).logits.float().cpu()
        model.float()
        hf32 = model(**kw).logits.cpu()
    scale = hf32[real].abs().max().item()
    err_q = (ours[real] - hf32[real]).abs().max().item() / scale
    err_h = (hf16[real] - hf32[real]).abs().max().item() / scale
    tol = max(BF16_FLOOR, BF16_VS_HF * err_h)
    top = (ours[real].argmax(-1) == hf32[real].argmax(-1)).float().mean().item()
    log(f"quartet bf16 vs HF fp32: max relative error {err_q:.3e} (HF bf16 vs fp32: {err_h:.3e}; "
        f"tolerance {tol:.3e}); top-1 agreement {top:.3f}")
    if not err_q <= tol:
        log("FAIL quartet's logits on the export are further from HF's than the tolerance")
        ok = False
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
