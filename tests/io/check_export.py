"""`quartet export` and `quartet inspect` on the checkpoints of make_checkpoints.py.

    python check_export.py --quartet BIN --helper IO_MAKE_CHECKPOINTS --mpirun 'mpirun|-np|1'
                           --work DIR CASE
CASE is one of
  llama     actor and critic (float32, built-in tokenizer): the run directory (follows
            `latest`), sharded output (--shard-size), --role critic, --dtype bfloat16, step_2
  gpt2      float16 actor with a Hugging Face tokenizer directory, --dtype float32
  neox      bfloat16 actor and critic
  gptj      actor, and a critic Hugging Face has no class for (checked with quartet alone)
  qwen3     actor and critic: q/k norms, an explicit head_dim, a sliding layer, q/k/v/o biases
  mistral   actor with a sliding window shorter than the test batch
  llama3    actor with Llama 3.1's rope scaling
  reward    a reward model (sequence_reward head) trained one Bradley–Terry step: HF's scores, and
            `quartet train` with the export as model.reward.path
  refusals  damaged (a flipped byte, a truncated file), incomplete, a role the checkpoint lacks,
            a non-empty --out, bad --dtype / --shard-size, no --out
  inspect   a step, a run directory, a damaged copy
  train     the trainer's own checkpoints (2 iterations of inputs/demo.deck): inspect, export
Every export is compared with what the run had in memory when it wrote the checkpoint
(make_checkpoints.cpp's reference/: the weights bit for bit; the outputs on a batch, for float32
models), loaded with Hugging Face transformers (no missing, unexpected or misshapen tensor; the
same outputs as `quartet generate --logits` on the export, 1e-4 relative), and its tokenizer
loaded with AutoTokenizer (the same ids and text as `quartet tokenize` and, for the built-in
tokenizer, as the built-in one). Exit 0 only if every check holds.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import torch

TOL = 1e-4  # relative, float32 against float32 (tests/parity/check_generate.py)
FAILURES = []


def log(msg):
    print(f"check_export: {msg}", flush=True)


def check(ok, what):
    log(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd, stdin=None, cwd=None):
    p = subprocess.run([str(c) for c in cmd], input=stdin, capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


class Env:
    def __init__(self, args, case):
        self.quartet = args.quartet
        self.helper = args.helper
        self.mpirun = [w for w in args.mpirun.split("|") if w]
        self.mpirun_train = [w for w in args.mpirun_train.split("|") if w]
        self.source = args.source_dir
        self.work = args.work
        self.out = os.path.join(args.work, "exports", case)
        shutil.rmtree(self.out, ignore_errors=True)
        os.makedirs(self.out)

    def run_dir(self, name):
        return os.path.join(self.work, name)

    def reference(self, name, what):
        return os.path.join(self.work, name, "reference", what)

    def export(self, ckpt, name, *options):
        dest = os.path.join(self.out, name)
        rc, out, err = run([self.quartet, "export", ckpt, "--out", dest, *options])
        sys.stdout.write(out)
        sys.stdout.write(err)
        if not check(rc == 0, f"quartet export {os.path.relpath(ckpt, self.work)} {' '.join(options)} exits 0"):
            raise SystemExit(1)
        check(not glob.glob(dest + ".tmp-*"), "no temporary directory left beside the export")
        return dest, out


# ----- weights ------------------------------------------------------------------------------

def load_export_weights(d):
    from safetensors.torch import load_file
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    state = {}
    for name in files:
        state.update(load_file(os.path.join(d, name)))
    return state


def check_weights(d, reference_path, dtype=None):
    """Every tensor of the export equals the in-memory model's (cast to `dtype` as torch casts:
    round to nearest even, which is what quartet's .to() does too), bit for bit."""
    from safetensors.torch import load_file
    ref = load_file(reference_path)
    got = load_export_weights(d)
    check(sorted(got) == sorted(ref), f"{os.path.basename(d)}: the export holds the model's {len(ref)} tensors "
          f"(missing {sorted(set(ref) - set(got))[:3]}, extra {sorted(set(got) - set(ref))[:3]})")
    bad = []
    for name, want in ref.items():
        if name not in got:
            continue
        want = want.to(dtype) if dtype is not None else want
        have = got[name]
        if have.dtype != want.dtype or have.shape != want.shape or not torch.equal(
                have.view(-1).view(torch.uint8) if have.numel() else have,
                want.contiguous().view(-1).view(torch.uint8) if want.numel() else want):
            bad.append(name)
    check(not bad, f"{os.path.basename(d)}: every tensor bitwise equal to the in-memory model's "
          f"({next(iter(got.values())).dtype}; differing: {bad[:3]})")
    return sum(t.numel() for t in ref.values())


# ----- Hugging Face model and outputs --------------------------------------------------------

def hf_model(d, head):
    import transformers as tf
    cls = {"causal_lm": tf.AutoModelForCausalLM, "token_value": tf.AutoModelForTokenClassification,
           "sequence_reward": tf.AutoModelForSequenceClassification}[head]
    model, info = cls.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    check(not problems, f"{os.path.basename(d)}: transformers loads it as {type(model).__name__} with every tensor "
          f"in place {problems if problems else ''}")
    return model.eval()


def hf_output(model, ids, mask, head):
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return out if head == "causal_lm" else out[..., 0]  # values [B, T], or scores [B]


def relative_error(a, b, mask):
    """At the real positions of [B, T] outputs; over every row of [B] scores."""
    real = mask.bool() if a.dim() > 1 else torch.ones_like(a, dtype=torch.bool)
    return ((a[real] - b[real]).abs().max() / b[real].abs().max()).item()


def read_h5(path, *names):
    import h5py
    with h5py.File(path, "r") as f:
        return [torch.from_numpy(f[n][...]) for n in names]


def check_against_memory(env, d, run_name, role, model, head):
    """HF on the export against the model that was in memory when the checkpoint was written."""
    ids, mask, want = read_h5(env.reference(run_name, f"{role}_outputs.h5"), "input_ids", "attention_mask", "output")
    err = relative_error(hf_output(model, ids, mask, head).float(), want.float(), mask)
    what = {"causal_lm": "logits", "token_value": "values", "sequence_reward": "scores"}[head]
    check(err <= TOL, f"{os.path.basename(d)}: HF's {what} equal the in-memory model's (max relative error {err:.2e})")


PROMPTS = ["Sort 3 1 2 ->", "hello world", "x"]


def check_generate(env, d, model, tokenizer):
    """`quartet generate --logits` on the export against HF on the same batch, and the batch
    against HF's tokenizer."""
    work = os.path.join(env.out, os.path.basename(d) + "-generate")
    os.makedirs(work, exist_ok=True)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}) + "\n")
    deck = os.path.join(work, "generate.deck")
    with open(deck, "w") as f:
        f.write("# written by tests/io/check_export.py\n[run]\nseed = 1\n\n[placement]\nactor = 1\n\n"
                "[model.actor]\ndtype = float32\n\n[rollout]\nbatch = 3\nmax_new_tokens = 2\ntemperature = 0\n")
    h5 = os.path.join(work, "logits.h5")
    rc, out, err = run(env.mpirun + [env.quartet, "generate", deck, "--set", f"model.actor.path={d}",
                                     "--set", f"rollout.prompts={prompts}", "--set", f"run.out={work}", "--logits", h5])
    if not check(rc == 0, f"{os.path.basename(d)}: quartet generate runs on the export"):
        sys.stdout.write(out + err)
        return
    ids, mask, ours = read_h5(h5, "input_ids", "attention_mask", "logits")
    real = mask.bool()
    same_ids = all(ids[b][real[b]].tolist() == tokenizer(p).input_ids for b, p in enumerate(PROMPTS))
    check(same_ids, f"{os.path.basename(d)}: quartet's prompt ids equal HF's tokenizer's")
    err = relative_error(ours, hf_output(model, ids, mask, "causal_lm"), mask)
    check(err <= TOL, f"{os.path.basename(d)}: quartet generate --logits equals HF on the export "
          f"(max relative error {err:.2e})")


# ----- tokenizer ------------------------------------------------------------------------------

def check_tokenizer(env, d, texts, builtin=None):
    """AutoTokenizer on the export against `quartet tokenize` on it and, for the built-in
    tokenizer, against the built-in tokenizer's own ids (make_checkpoints.cpp wrote them)."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(d)
    rc, out, err = run([env.quartet, "tokenize", d], stdin="\n".join(texts) + "\n")
    ours = [[int(x) for x in line.split()] for line in out.split("\n")[:-1]]
    check(rc == 0 and len(ours) == len(texts), f"{os.path.basename(d)}: quartet tokenize reads the export {err}")
    diff = [t for t, o in zip(texts, ours) if hf(t).input_ids != o]
    check(not diff, f"{os.path.basename(d)}: AutoTokenizer and quartet tokenize give the same ids "
          f"for {len(texts)} texts (differ: {diff})")
    rc, back, _ = run([env.quartet, "tokenize", d, "--decode"], stdin="\n".join(out.split("\n")[:-1]) + "\n")
    back = back.split("\n")[:-1]
    diff = [t for t, b in zip(texts, back) if hf.decode(hf(t).input_ids) != b]
    check(rc == 0 and not diff, f"{os.path.basename(d)}: AutoTokenizer and quartet decode alike (differ: {diff})")
    if builtin is None:
        return hf
    bad = []
    for e in builtin:
        t = e["text"]
        if (hf(t).input_ids != e["ids"] or hf(t, add_special_tokens=False).input_ids != e["ids_plain"]
                or hf.decode(e["ids"]) != e["decoded"] or hf.decode(e["ids"], skip_special_tokens=True) != e["decoded_skip"]):
            bad.append(t)
    check(not bad, f"{os.path.basename(d)}: AutoTokenizer encodes and decodes {len(builtin)} texts exactly as "
          f"quartet's built-in tokenizer (differ: {bad})")
    check((hf.bos_token, hf.eos_token, hf.pad_token) == ("<bos>", "<eos>", "<pad>"),
          f"{os.path.basename(d)}: AutoTokenizer knows <bos> <eos> <pad> ({hf.bos_token} {hf.eos_token} {hf.pad_token})")
    return hf


def builtin_texts(env):
    with open(os.path.join(env.work, "builtin_tokens.json")) as f:
        return json.load(f)


def config_of(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


# ----- cases ----------------------------------------------------------------------------------

def case_llama(env):
    builtin = builtin_texts(env)
    texts = [e["text"] for e in builtin]
    # The run directory: `latest` is step_3. A small shard size makes a sharded export.
    d, out = env.export(env.run_dir("llama"), "actor", "--shard-size", "40KB")
    check("step_3" in out, "the run directory resolves to step_3, which `latest` names")
    shards = glob.glob(os.path.join(d, "model-*-of-*.safetensors"))
    check(len(shards) > 1 and os.path.exists(os.path.join(d, "model.safetensors.index.json")),
          f"--shard-size 40KB gives shards and an index ({len(shards)} shards)")
    check(all(os.path.getsize(s) <= 40000 + 4096 for s in shards), "each shard is within the limit (plus its header)")
    check_weights(d, env.reference("llama", "actor_state.safetensors"))
    model = hf_model(d, "causal_lm")
    check_against_memory(env, d, "llama", "actor", model, "causal_lm")
    tok = check_tokenizer(env, d, texts, builtin)
    check_generate(env, d, model, tok)

    step3 = os.path.join(env.run_dir("llama"), "checkpoints", "step_3")
    d, _ = env.export(step3, "critic", "--role", "critic")
    check_weights(d, env.reference("llama", "critic_state.safetensors"))
    check(config_of(d)["architectures"] == ["LlamaForTokenClassification"] and config_of(d)["num_labels"] == 1,
          "the critic's config.json: LlamaForTokenClassification, num_labels 1")
    check_against_memory(env, d, "llama", "critic", hf_model(d, "token_value"), "token_value")

    d, _ = env.export(os.path.join(env.run_dir("llama"), "checkpoints"), "actor-bf16", "--dtype", "bfloat16")
    check_weights(d, env.reference("llama", "actor_state.safetensors"), torch.bfloat16)
    check(config_of(d)["dtype"] == "bfloat16", "--dtype bfloat16: config.json says bfloat16")

    # An older step is exported as it was: its weights are not step_3's.
    d, out = env.export(os.path.join(env.run_dir("llama"), "checkpoints", "step_2"), "actor-step2")
    from safetensors.torch import load_file
    ref = load_file(env.reference("llama", "actor_state.safetensors"))
    got = load_export_weights(d)
    check("iteration 2" in out and any(not torch.equal(got[k], ref[k]) for k in ref),
          "step_2 exports step_2's weights (they differ from step_3's)")


def case_gpt2(env):
    d, _ = env.export(env.run_dir("gpt2"), "actor")
    check_weights(d, env.reference("gpt2", "actor_state.safetensors"))
    check(config_of(d)["dtype"] == "float16", "config.json keeps the model's float16")
    src = os.path.join(env.work, "tokenizer")
    same = all(open(os.path.join(d, f), "rb").read() == open(os.path.join(src, f), "rb").read()
               for f in os.listdir(src))
    check(same, f"the tokenizer directory's files are copied unchanged ({sorted(os.listdir(src))})")
    model = hf_model(d, "causal_lm")
    texts = ["The quick brown fox", "Grüße aus München", "  two  spaces\tand tab", "<|endoftext|> inline", ""]
    tok = check_tokenizer(env, d, texts)
    check_generate(env, d, model, tok)

    d, _ = env.export(env.run_dir("gpt2"), "actor-fp32", "--dtype", "float32")
    check_weights(d, env.reference("gpt2", "actor_state.safetensors"), torch.float32)


def case_neox(env):
    builtin = builtin_texts(env)
    d, _ = env.export(env.run_dir("neox"), "actor")
    check_weights(d, env.reference("neox", "actor_state.safetensors"))
    check(config_of(d)["dtype"] == "bfloat16", "config.json keeps the model's bfloat16")
    model = hf_model(d, "causal_lm")
    tok = check_tokenizer(env, d, [e["text"] for e in builtin], builtin)
    check_generate(env, d, model, tok)

    d, _ = env.export(env.run_dir("neox"), "critic", "--role", "critic")
    check_weights(d, env.reference("neox", "critic_state.safetensors"))
    model = hf_model(d, "token_value")
    # bfloat16 compute in memory differs from HF's float32, so quartet runs the export in
    # float32 too (the helper's forward mode) and both see the same bfloat16 weights.
    ids = torch.randint(3, model.config.vocab_size, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    check_quartet_forward(env, d, "token_value", ids, mask, hf_output(model, ids, mask, "token_value"), "HF's values")


def check_quartet_forward(env, d, head, ids, mask, want, against):
    import h5py
    src = os.path.join(env.out, os.path.basename(d) + "-in.h5")
    dst = os.path.join(env.out, os.path.basename(d) + "-out.h5")
    with h5py.File(src, "w") as f:
        f["input_ids"] = ids.numpy()
        f["attention_mask"] = mask.numpy()
    rc, out, err = run([env.helper, "forward", d, head, src, dst])
    if not check(rc == 0, f"{os.path.basename(d)}: quartet loads the export ({head}) {err.strip()}"):
        return
    got, = read_h5(dst, "output")
    e = relative_error(got.float(), want.float(), mask)
    check(e <= TOL, f"{os.path.basename(d)}: quartet's {head} output on the export equals {against} "
          f"(max relative error {e:.2e})")


def case_gptj(env):
    builtin = builtin_texts(env)
    d, _ = env.export(env.run_dir("gptj"), "actor")
    check_weights(d, env.reference("gptj", "actor_state.safetensors"))
    model = hf_model(d, "causal_lm")
    check_against_memory(env, d, "gptj", "actor", model, "causal_lm")
    tok = check_tokenizer(env, d, [e["text"] for e in builtin], builtin)
    check_generate(env, d, model, tok)

    d, out = env.export(env.run_dir("gptj"), "critic", "--role", "critic")
    check_weights(d, env.reference("gptj", "critic_state.safetensors"))
    check("GPTJForTokenClassification" in out, "the export says HF has no GPTJForTokenClassification")
    log("skip HF for the GPT-J critic: transformers has no GPTJForTokenClassification; quartet's own "
        "loader is checked against the in-memory model instead")
    ids, mask, want = read_h5(env.reference("gptj", "critic_outputs.h5"), "input_ids", "attention_mask", "output")
    check_quartet_forward(env, d, "token_value", ids, mask, want, "the in-memory critic's values")


def case_family(env, name, critic, config_wants):
    """A family of Hugging Face's Llama-shaped classes: the export's config.json holds what
    transformers needs to build the same model (config_wants: key -> value), and the export
    loads in transformers and gives the in-memory model's outputs, and quartet generate's."""
    builtin = builtin_texts(env)
    d, _ = env.export(env.run_dir(name), "actor")
    check_weights(d, env.reference(name, "actor_state.safetensors"))
    cfg = config_of(d)
    wrong = {k: (cfg.get(k), v) for k, v in config_wants.items() if cfg.get(k) != v}
    check(not wrong, f"{name}: config.json says {sorted(config_wants)} as the model has them (differ: {wrong})")
    model = hf_model(d, "causal_lm")
    check_against_memory(env, d, name, "actor", model, "causal_lm")
    tok = check_tokenizer(env, d, [e["text"] for e in builtin], builtin)
    check_generate(env, d, model, tok)
    if critic:
        d, _ = env.export(env.run_dir(name), "critic", "--role", "critic")
        check_weights(d, env.reference(name, "critic_state.safetensors"))
        check_against_memory(env, d, name, "critic", hf_model(d, "token_value"), "token_value")


def case_qwen3(env):
    case_family(env, "qwen3", True, {"model_type": "qwen3", "head_dim": 12, "attention_bias": True,
                                     "use_sliding_window": True, "sliding_window": 4,
                                     "layer_types": ["full_attention", "sliding_attention"]})


def case_mistral(env):
    case_family(env, "mistral", False, {"model_type": "mistral", "sliding_window": 4})


def case_llama3(env):
    case_family(env, "llama3", False, {"model_type": "llama", "rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})


def expect_refusal(env, what, cmd, *needles):
    rc, out, err = run(cmd)
    text = out + err
    missing = [n for n in needles if n not in text]
    check(rc != 0 and not missing, f"{what}: exit {rc} (non-zero), message names {list(needles)}"
          + (f"; missing {missing} in:\n{text}" if missing or rc == 0 else ""))
    return text


def damaged_copy(env, name, damage):
    """A copy of the llama run's step_3 under exports/refusals/<name>/checkpoints/, damaged."""
    root = os.path.join(env.out, name, "checkpoints")
    step = os.path.join(root, "step_3")
    shutil.copytree(os.path.join(env.run_dir("llama"), "checkpoints", "step_3"), step)
    damage(step)
    return step


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def case_refusals(env):
    q = env.quartet
    dest = os.path.join(env.out, "never")
    flipped = damaged_copy(env, "flipped", lambda s: flip_byte(os.path.join(s, "actor.h5"),
                                                                 os.path.getsize(os.path.join(s, "actor.h5")) // 2))
    expect_refusal(env, "a flipped byte in actor.h5", [q, "export", flipped, "--out", dest],
                   "damaged", "actor.h5", "checksum")
    check(not os.path.exists(dest) and not glob.glob(dest + ".tmp-*"), "nothing is written for a refused export")

    def truncate(s):
        p = os.path.join(s, "critic.h5")
        os.truncate(p, os.path.getsize(p) - 100)
    truncated = damaged_copy(env, "truncated", truncate)
    expect_refusal(env, "a truncated critic.h5, exporting the actor",
                   [q, "export", os.path.dirname(truncated), "--out", dest], "critic.h5", "truncated")

    step4 = os.path.join(env.run_dir("llama"), "checkpoints", "step_4")
    expect_refusal(env, "an incomplete step", [q, "export", step4, "--out", dest], "step_4", "no manifest.json")
    expect_refusal(env, "--role critic of a critic-free run", [q, "export", env.run_dir("gpt2"), "--out", dest,
                   "--role", "critic"], "no critic", "actor")
    expect_refusal(env, "--role reward", [q, "export", env.run_dir("llama"), "--out", dest, "--role", "reward"],
                   "no reward", "actor, critic")
    full = os.path.join(env.out, "full")
    os.makedirs(full)
    with open(os.path.join(full, "keep.txt"), "w") as f:
        f.write("mine\n")
    expect_refusal(env, "a non-empty --out", [q, "export", env.run_dir("llama"), "--out", full], full, "not empty")
    check(os.listdir(full) == ["keep.txt"] and open(os.path.join(full, "keep.txt")).read() == "mine\n",
          "the non-empty --out is left as it was")
    expect_refusal(env, "--dtype int8", [q, "export", env.run_dir("llama"), "--out", dest, "--dtype", "int8"],
                   "--dtype", "int8")
    expect_refusal(env, "--shard-size 5XB", [q, "export", env.run_dir("llama"), "--out", dest, "--shard-size", "5XB"],
                   "--shard-size", "5XB")
    expect_refusal(env, "no --out", [q, "export", env.run_dir("llama")], "--out")
    expect_refusal(env, "a directory without checkpoints", [q, "export", env.out, "--out", dest], "not a checkpoint")
    check(not os.path.exists(dest) and not glob.glob(dest + ".tmp-*"), "no refusal wrote anything")

    # An empty --out is fine: it is replaced by the export.
    empty = os.path.join(env.out, "empty")
    os.makedirs(empty)
    env.export(env.run_dir("llama"), "empty")
    check(os.path.exists(os.path.join(empty, "config.json")), "an empty --out directory receives the export")


def case_inspect(env):
    q = env.quartet
    step3 = os.path.join(env.run_dir("llama"), "checkpoints", "step_3")
    with open(os.path.join(step3, "manifest.json")) as f:
        info = json.load(f)["info"]
    from safetensors.torch import load_file
    params = {r: sum(t.numel() for t in load_file(env.reference("llama", f"{r}_state.safetensors")).values())
              for r in ("actor", "critic")}
    rc, out, err = run([q, "inspect", step3])
    sys.stdout.write(out + err)
    check(rc == 0, "inspect of an intact step exits 0")
    for needle in ["iteration 3", "intact", info["git_commit"], info["placement"],
                   f"{params['actor']} parameters", f"{params['critic']} parameters",
                   "LlamaForCausalLM", "LlamaForTokenClassification", "optimizer state present", "trainer.h5"]:
        check(needle in out, f"inspect of a step shows {needle!r}")

    rc, out, err = run([q, "inspect", env.run_dir("llama")])
    sys.stdout.write(out + err)
    check(rc == 0, "inspect of a run directory exits 0 (an incomplete step is not damage)")
    lines = out.split("\n")
    for step, state in [("step_2", "complete"), ("step_3", "complete"), ("step_4", "incomplete")]:
        check(any(line.split()[:2] == [step, state] for line in lines if line.strip()),
              f"the listing says {step} {state}")
    check(any("step_3" in line and "<- latest" in line for line in lines), "the listing marks step_3 latest")
    check("step_3: quartet checkpoint, iteration 3" in out, "the run directory's latest step is detailed")

    root = os.path.join(env.out, "damaged", "checkpoints")
    step = os.path.join(root, "step_3")
    shutil.copytree(step3, step)
    flip_byte(os.path.join(step, "critic.h5"), 100)
    rc, out, err = run([q, "inspect", step])
    sys.stdout.write(out + err)
    check(rc == 1, f"inspect of a damaged step exits 1 (got {rc})")
    check("DAMAGED" in out and "step_3/critic.h5" in out and "checksum" in out and "damaged" in err,
          "inspect names the damaged file and says so")
    check("optimizer state present" in out, "the intact actor.h5 beside it is still read")

    rc, out, err = run([q, "inspect", os.path.join(env.work, "tokenizer")])
    check(rc != 0 and "neither a run file nor a checkpoint" in err, "inspect refuses a directory of other things")


def case_train(env):
    """The trainer's own checkpoints: two iterations of the CPU demo (inputs/demo.deck, actor,
    critic and reference on one rank each), a checkpoint after each, then inspect and export
    them. No in-memory copy to compare with here: HF and quartet generate on the export agree,
    and the weights are the checkpoint file's model/ datasets bit for bit."""
    import h5py
    run_dir = os.path.join(env.out, "run")
    cmd = env.mpirun_train + [env.quartet, "train", "inputs/demo.deck",
                              "--set", "run.iterations=2", "--set", "checkpoint.every=1", "--set", f"run.out={run_dir}"]
    rc, out, err = run(cmd, cwd=env.source)  # the deck's paths are relative to the source tree
    if not check(rc == 0, "quartet train (2 iterations of the demo) exits 0"):
        sys.stdout.write(out + err)
        return
    ckpts = os.path.join(run_dir, "checkpoints")
    if not check(os.path.exists(os.path.join(ckpts, "step_2", "manifest.json")),
                 f"the trainer wrote {ckpts}/step_2 with its manifest"):
        return
    rc, out, err = run([env.quartet, "inspect", run_dir])
    sys.stdout.write(out + err)
    check(rc == 0 and "iteration 2" in out and "intact" in out, "inspect of the trained run: intact, iteration 2")
    builtin = builtin_texts(env)
    for role, head, cls in [("actor", "causal_lm", "LlamaForCausalLM"), ("critic", "token_value", "LlamaForTokenClassification")]:
        d, _ = env.export(run_dir, role, "--role", role)
        check(config_of(d)["architectures"] == [cls], f"the {role}'s config.json names {cls}")
        with h5py.File(os.path.join(ckpts, "step_2", f"{role}.h5"), "r") as f:
            stored = {k: torch.from_numpy(f["model"][k][...].astype("float32")) for k in f["model"]}
        got = load_export_weights(d)
        check(sorted(stored) == sorted(got) and all(torch.equal(got[k].float(), v) for k, v in stored.items()),
              f"the {role}'s export equals the checkpoint's model/ datasets ({len(stored)} tensors)")
        model = hf_model(d, head)
        if role == "actor":
            tok = check_tokenizer(env, d, [e["text"] for e in builtin], builtin)
            check_generate(env, d, model, tok)
        else:
            ids = torch.randint(3, model.config.vocab_size, (2, 6))
            mask = torch.ones_like(ids)
            mask[1, :2] = 0
            check_quartet_forward(env, d, "token_value", ids, mask, hf_output(model, ids, mask, "token_value"),
                                  "HF's values")


def case_reward(env):
    """A reward model trained by quartet (make_checkpoints.cpp's reward run: a Llama
    sequence_reward model, one Bradley–Terry step, role "reward"): exported, transformers loads it
    as LlamaForSequenceClassification with every tensor in place and gives the in-memory model's
    scores, and so does quartet's own loader; `quartet train` then takes the export as
    model.reward.path, and the scores in its run file are transformers' on the same sequences."""
    import h5py
    builtin = builtin_texts(env)
    d, _ = env.export(env.run_dir("reward"), "reward", "--role", "reward")
    check_weights(d, env.reference("reward", "reward_state.safetensors"))
    cfg = config_of(d)
    check(cfg["architectures"] == ["LlamaForSequenceClassification"] and cfg["num_labels"] == 1 and
          cfg["pad_token_id"] == 0, f"the reward model's config.json: LlamaForSequenceClassification, num_labels 1, "
          f"a pad id for transformers to find each row's last token ({cfg['architectures']}, {cfg.get('pad_token_id')})")
    model = hf_model(d, "sequence_reward")
    check_against_memory(env, d, "reward", "reward", model, "sequence_reward")
    ids, mask, want = read_h5(env.reference("reward", "reward_outputs.h5"), "input_ids", "attention_mask", "output")
    check_quartet_forward(env, d, "sequence_reward", ids, mask, want, "the in-memory reward model's scores")
    check_tokenizer(env, d, [e["text"] for e in builtin], builtin)

    run_dir = os.path.join(env.out, "train")
    cmd = env.mpirun + [env.quartet, "train", "tests/decks/train_colocated.deck", "--set", f"model.reward.path={d}",
                        "--set", "run.iterations=2", "--set", "output.rollouts_every=1", "--set", f"run.out={run_dir}"]
    rc, out, err = run(cmd, cwd=env.source)
    if not check(rc == 0 and "train: done" in out, f"quartet train takes the export as model.reward.path (exit {rc})"):
        sys.stdout.write(out + err)
        return
    compared = left_out = 0
    worst = 0.0
    with h5py.File(os.path.join(run_dir, "run.h5"), "r") as f:
        for it in f["rollouts"]:
            g = f["rollouts"][it]
            seqs, masks, scores = (torch.from_numpy(g[k][()]) for k in ("sequences", "attention_mask", "scores"))
            for s, m, score in zip(seqs, masks, scores):
                real = s[m.bool()].unsqueeze(0)
                if real[0, -1] == cfg["pad_token_id"]:  # transformers would look for an earlier last token
                    left_out += 1
                    continue
                with torch.no_grad():
                    hf = model(input_ids=real, attention_mask=torch.ones_like(real)).logits[0, 0]
                worst = max(worst, abs(float(hf) - float(score)) / max(abs(float(hf)), 1e-3))
                compared += 1
    check(compared >= 6 and worst <= TOL, f"the run file's scores are transformers' on the rollouts "
          f"({compared} rows, {left_out} ending in <pad> left out; max relative error {worst:.2e})")


CASES = {"llama": case_llama, "train": case_train, "gpt2": case_gpt2, "neox": case_neox, "gptj": case_gptj,
         "qwen3": case_qwen3, "mistral": case_mistral, "llama3": case_llama3,
         "refusals": case_refusals, "inspect": case_inspect, "reward": case_reward}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quartet", required=True)
    ap.add_argument("--helper", required=True, help="io_make_checkpoints (its forward mode)")
    ap.add_argument("--mpirun", default="", help="launcher words joined by '|', for quartet generate")
    ap.add_argument("--mpirun-train", default="", help="launcher words for the 3 ranks of quartet train")
    ap.add_argument("--source-dir", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--work", required=True, help="the fixture's directory (make_checkpoints.py --work)")
    ap.add_argument("cases", nargs="+", choices=sorted(CASES), metavar="CASE",
                    help="one or more of " + ", ".join(sorted(CASES)) + ", in one process: torch and "
                    "transformers load once")
    args = ap.parse_args()
    failed = []
    for case in args.cases:
        before = len(FAILURES)
        torch.manual_seed(0)
        CASES[case](Env(args, case))
        log(f"{case}: {'PASS' if len(FAILURES) == before else f'FAIL ({len(FAILURES) - before} checks)'}")
        if len(FAILURES) > before:
            failed.append(case)
    if len(args.cases) > 1:
        log(f"{len(args.cases) - len(failed)} of {len(args.cases)} cases pass" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
