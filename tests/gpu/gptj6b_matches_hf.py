"""GPT-J-6B at full size: `quartet generate --logits` against Hugging Face, in bf16 on a GPU.

    python gptj6b_matches_hf.py --quartet BIN [--mpirun 'mpirun|--oversubscribe|-np|1']
                                [--work DIR] [--config CONFIG.json] [--device cuda|cpu] [--tiny]
                                [--keep]

1. Builds transformers' GPTJForCausalLM from the published config (inputs/models/gpt-j-6b/
   config.json) with seeded random weights, directly on the device in bfloat16, re-draws the
   LayerNorm weights and the biases (HF initialises them to ones / zeros, which would hide a
   loader that swaps or drops them), and saves it with save_pretrained (sharded safetensors)
   into a fresh directory under --work, with a small byte-level BPE tokenizer.
2. Runs `quartet generate` on that directory in bfloat16 on the device, with --logits: quartet
   writes the left-padded prompt batch (input_ids, attention_mask) and its logits to HDF5.
3. Runs HF on the same ids (positions counted over real tokens, as quartet and HF generate do)
   in bfloat16, then the same weights in float32, and compares at the real tokens:
       err(quartet bf16 vs HF fp32) <= max(3e-2, 1.5 * err(HF bf16 vs HF fp32))
   where err = max |a - b| / max |HF fp32| (the criterion of test_model's GpuBf16 suite).
4. Deletes the weights (about 12 GB) whatever happened, unless --keep.

Exit status: 0 pass, 1 fail, 77 skipped because --device cuda and torch sees no CUDA device
(ctest's SKIP_RETURN_CODE). --tiny shrinks the model to 2 layers of width 64 (vocabulary and
everything else as published) so that the whole path runs in seconds on a CPU: the dry run that
checks this script's plumbing where there is no GPU.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
BF16_FLOOR = 3e-2   # test_model.cpp kBf16Tol
BF16_VS_HF = 1.5    # test_model.cpp kBf16VsHF
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROMPTS = [
    "The quick brown fox jumps over the lazy dog, and then",
    "def add(a, b):\n    return",
    "Grüße aus München!",
    "x",
]


def log(msg):
    print(f"gptj6b: {msg}", flush=True)


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the byte-level BPE alphabet, in GPT-2's order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def make_tokenizer(model_dir, vocab_size, eos_id):
    """A byte-level BPE (GPT-2's pre-tokenizer and alphabet) with exactly vocab_size ids, so
    that `quartet generate` can decode whatever the random model samples: the 256 bytes, then
    two-byte tokens (printable ASCII pairs first, so prompts merge), and <|endoftext|> at eos_id
    as in GPT-2 / GPT-J. `quartet generate` needs tokenizer.json in the model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = bytes_to_unicode()
    chars = [alphabet[b] for b in range(256)]
    ascii_chars = [alphabet[b] for b in range(0x20, 0x7f)]
    order = [(a, b) for a in ascii_chars for b in ascii_chars]
    seen = set(order)
    order += [(a, b) for a in chars for b in chars if (a, b) not in seen]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = []
    pairs = iter(order)
    for i in range(256, vocab_size):
        if i == eos_id:
            vocab["<|endoftext|>"] = i
            continue
        a, b = next(pairs)
        vocab[a + b] = i
        merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    if tok.get_vocab_size() != vocab_size or tok.token_to_id("<|endoftext|>") != eos_id:
        raise RuntimeError(f"tokenizer: {tok.get_vocab_size()} ids, <|endoftext|> = "
                           f"{tok.token_to_id('<|endoftext|>')}; wanted {vocab_size}, {eos_id}")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(model_dir)
    return fast


def build_model(config_path, tiny, device, seed):
    import torch
    import transformers as tf

    cfg = tf.GPTJConfig.from_json_file(config_path)
    if tiny:
        cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.rotary_dim = 64, 2, 4, 8
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    with torch.device(device):
        model = tf.GPTJForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 1:
                continue
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
            if ".ln_" in name or "ln_f" in name:
                if name.endswith(".weight"):
                    p.copy_(1.0 + 0.1 * noise)
                else:
                    p.copy_(0.1 * noise)
            else:
                p.copy_(0.02 * noise)
    n = sum(p.numel() for p in model.parameters())
    return model, cfg, n


def write_deck(path, device):
    with open(path, "w") as f:
        f.write(f"""# written by tests/gpu/gptj6b_matches_hf.py
[run]
seed = 1

[placement]
actor = 1

[dist]
device = {device}

[model.actor]
dtype = bfloat16

[rollout]
batch = {len(PROMPTS)}
max_new_tokens = 4
temperature = 0
""")


def run_quartet(args, work, model_dir):
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}, ensure_ascii=False) + "\n")
    deck = os.path.join(work, "gptj6b.deck")
    write_deck(deck, args.device)
    out = os.path.join(work, "out")
    h5 = os.path.join(out, "logits.h5")
    cmd = ([w for w in args.mpirun.split("|") if w] if args.mpirun else []) + [
        args.quartet, "generate", deck, "--set", f"model.actor.path={model_dir}",
        "--set", f"rollout.prompts={prompts}", "--set", f"run.out={out}", "--logits", h5]
    log("running " + " ".join(cmd))
    rc = subprocess.call(cmd)
    if rc != 0:
        raise RuntimeError(f"quartet generate exited with {rc}")
    return h5


def compare(model, fast, h5_path, device):
    import h5py
    import torch

    with h5py.File(h5_path, "r") as f:
        ids = torch.from_numpy(f["input_ids"][...])
        mask = torch.from_numpy(f["attention_mask"][...])
        ours = torch.from_numpy(f["logits"][...]).float()
    real = mask.bool()
    ok = True
    # The batch quartet ran is the prompts as HF's tokenizer encodes them, left-padded.
    for b, p in enumerate(PROMPTS):
        want = fast(p).input_ids
        got = ids[b][real[b]].tolist()
        if got != want:
            log(f"FAIL prompt {b}: quartet's ids {got} != HF tokenizer's {want}")
            ok = False
    log(f"batch {tuple(ids.shape)}, real tokens per prompt {mask.sum(-1).tolist()}")

    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        args = dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device))
        hf16 = model(**args).logits.float().cpu()
        model.float()  # the same weights in fp32 (in place: the bf16 copy is freed)
        hf32 = model(**args).logits.cpu()
    if ours.shape != hf32.shape:
        log(f"FAIL logits shape {tuple(ours.shape)} != HF's {tuple(hf32.shape)}")
        return False
    scale = hf32[real].abs().max().item()
    err_q = (ours[real] - hf32[real]).abs().max().item() / scale
    err_h = (hf16[real] - hf32[real]).abs().max().item() / scale
    tol = max(BF16_FLOOR, BF16_VS_HF * err_h)
    top_q = (ours[real].argmax(-1) == hf32[real].argmax(-1)).float().mean().item()
    top_h = (hf16[real].argmax(-1) == hf32[real].argmax(-1)).float().mean().item()
    log(f"max|HF fp32 logits| {scale:.4g}")
    log(f"quartet bf16 vs HF fp32: max relative error {err_q:.3e}, top-1 agreement {top_q:.3f}")
    log(f"HF bf16      vs HF fp32: max relative error {err_h:.3e}, top-1 agreement {top_h:.3f}")
    log(f"tolerance max({BF16_FLOOR}, {BF16_VS_HF} x {err_h:.3e}) = {tol:.3e}")
    good = err_q <= tol  # NaN fails
    if not good:
        log("FAIL quartet's bf16 logits are further from HF fp32 than the tolerance")
    return ok and good


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quartet", required=True, help="the quartet binary")
    ap.add_argument("--mpirun", default="", help="launcher words joined by '|' (e.g. mpirun|-np|1)")
    ap.add_argument("--work", default=os.path.join(os.getcwd(), "gptj6b"),
                    help="directory for the temporary model (about 12 GB) and quartet's output")
    ap.add_argument("--config", default=os.path.join(ROOT, "inputs", "models", "gpt-j-6b", "config.json"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="2 layers of width 64: the CPU dry run")
    ap.add_argument("--keep", action="store_true", help="keep the model directory")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        log("SKIP: torch sees no CUDA device (this check needs a GPU; --device cpu --tiny is the dry run)")
        return SKIP
    start = time.time()
    os.makedirs(args.work, exist_ok=True)
    # A run killed by a timeout cannot clean up: its 12 GB go now.
    for stale in os.listdir(args.work):
        if stale.startswith("gptj6b_"):
            log(f"removing {stale}, left by an earlier run")
            shutil.rmtree(os.path.join(args.work, stale), ignore_errors=True)
    work = tempfile.mkdtemp(prefix="gptj6b_", dir=args.work)
    model_dir = os.path.join(work, "model")
    try:
        t = time.time()
        model, cfg, n = build_model(args.config, args.tiny, args.device, args.seed)
        where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
        log(f"HF GPTJForCausalLM {'(tiny) ' if args.tiny else ''}n_embd {cfg.n_embd}, n_layer "
            f"{cfg.n_layer}, vocab {cfg.vocab_size}: {n} parameters, bf16 on {where} "
            f"({time.time() - t:.1f} s)")
        fast = make_tokenizer(model_dir, cfg.vocab_size, cfg.eos_token_id)
        t = time.time()
        model.save_pretrained(model_dir, max_shard_size="5MB" if args.tiny else "2GB")
        shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
        if len(shards) < 2 or not os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")):
            raise RuntimeError(f"expected a sharded checkpoint, got {shards}")
        log(f"saved {len(shards)} shards to {model_dir} ({time.time() - t:.1f} s)")

        t = time.time()
        h5 = run_quartet(args, work, model_dir)
        log(f"quartet generate done ({time.time() - t:.1f} s)")
        t = time.time()
        ok = compare(model, fast, h5, args.device)
        log(f"HF forward and comparison ({time.time() - t:.1f} s)")
    except Exception as e:  # report, clean up, fail
        log(f"FAIL {type(e).__name__}: {e}")
        ok = False
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    took = time.time() - start
    log(f"{'PASS' if ok else 'FAIL'} in {took:.1f} s")
    if took > 180 and not args.tiny:
        log(f"note: {took:.0f} s is over the 3 minutes this check is meant to take (see the phases above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
