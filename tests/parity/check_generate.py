"""Compares `quartet generate`'s output with Hugging Face on the same model directory.

    python check_generate.py EXPECTED.jsonl GENERATIONS.jsonl [MODEL_DIR LOGITS.h5]
Every prompt's greedy tokens and text must be identical to HF's; with MODEL_DIR and the file
written by `--logits`, HF's logits for the same left-padded batch (positions counted over real
tokens) must match at every real token to 1e-4 relative error (fp32). Exit 0 only if all hold.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return {r["index"]: r for r in map(json.loads, f) if r}


def check_logits(model_dir, h5_path):
    import h5py
    import torch
    from transformers import AutoModelForCausalLM

    with h5py.File(h5_path, "r") as f:
        ids = torch.from_numpy(f["input_ids"][...])
        mask = torch.from_numpy(f["attention_mask"][...])
        ours = torch.from_numpy(f["logits"][...])
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        hf = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    err = (ours[real] - hf[real]).abs().max().item() / hf[real].abs().max().item()
    print(f"check_generate: logits {tuple(ours.shape)}, max relative error {err:.2e} at real tokens")
    return err <= 1e-4


def main(expected_path, got_path, model_dir=None, h5_path=None):
    expected, got = load(expected_path), load(got_path)
    bad = 0
    if sorted(expected) != sorted(got):
        print(f"prompts differ: expected indices {sorted(expected)}, got {sorted(got)}")
        return 1
    for i, e in sorted(expected.items()):
        g = got[i]
        same = e["tokens"] == g["tokens"] and e["completion"] == g["completion"]
        bad += not same
        print(f"[{i}] {'ok  ' if same else 'DIFF'} hf={e['tokens']} quartet={g['tokens']}")
    print(f"check_generate: {len(expected) - bad} of {len(expected)} completions identical to HF")
    if model_dir and not check_logits(model_dir, h5_path):
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
