"""hf:ORG/NAME[@REVISION] model paths are found in a local Hugging Face hub cache, never online.

    python check_hf_paths.py WORK -- MPIRUN_WORDS... QUARTET

Builds a tiny Llama with transformers and lays it out as huggingface_hub's cache does (blobs/
named by hash, snapshots/<commit>/ of symbolic links to them, refs/<branch> holding the commit),
with a second revision whose snapshot lacks config.json. Then, against the plain directory:
  - `quartet tokenize hf:...` through HF_HUB_CACHE and through HF_HOME gives the same ids;
  - `quartet generate` with model.actor.path = hf:... (model.hub_cache, @main, @<commit>) gives
    the same completions token for token;
  - `quartet train` records the path as given and the snapshot it resolved to in run.h5;
  - a model, revision or cache that is not there, a snapshot without config.json and a malformed
    name are refused (exit non-zero) with a message saying what was looked for and what is there.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = ["sort 3817= 1378", "add 12+30= 42", "The quick brown fox jumps over the lazy dog."] * 20
REPO = "tiny-org/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
INCOMPLETE = "fedcba9876543210fedcba9876543210fedcba98"
CRASH = re.compile(r"Traceback|Exception raised from|frame #\d|Segmentation fault|terminate called")


def fail(msg):
    sys.exit(f"check_hf_paths: {msg}")


def make_model(out):
    torch.manual_seed(5)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=eos, pad_token_id=eos)
    LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)


def make_cache(cache, model_dir):
    """huggingface_hub's layout: every file a link from the snapshot to its blob."""
    repo = os.path.join(cache, "models--" + REPO.replace("/", "--"))
    os.makedirs(os.path.join(repo, "blobs"))
    for commit, skip in ((COMMIT, None), (INCOMPLETE, "config.json")):
        snap = os.path.join(repo, "snapshots", commit)
        os.makedirs(snap)
        for name in sorted(os.listdir(model_dir)):
            if name == skip:
                continue
            with open(os.path.join(model_dir, name), "rb") as f:
                data = f.read()
            blob = hashlib.sha256(data).hexdigest()
            with open(os.path.join(repo, "blobs", blob), "wb") as f:
                f.write(data)
            os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    os.makedirs(os.path.join(repo, "refs"))
    for ref, commit in (("main", COMMIT), ("v1", INCOMPLETE)):
        with open(os.path.join(repo, "refs", ref), "w") as f:
            f.write(commit)  # no newline, as huggingface_hub writes it
    os.makedirs(os.path.join(cache, "models--other-org--other-model"))
    return os.path.join(repo, "snapshots", COMMIT)


def run(cmd, env=None, stdin=None):
    full_env = dict(os.environ)
    for k in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        full_env.pop(k, None)
    full_env.update(env or {})
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240, env=full_env)
    if CRASH.search(p.stdout):
        fail(f"{' '.join(cmd)} crashed:\n{p.stdout[-3000:]}")
    return p.returncode, p.stdout


def must_run(cmd, env=None, stdin=None):
    rc, out = run(cmd, env, stdin)
    if rc != 0:
        fail(f"{' '.join(cmd)} exited {rc}:\n{out[-3000:]}")
    return out


def must_refuse(case, cmd, pattern, env=None):
    rc, out = run(cmd, env)
    if rc == 0 or not re.search(pattern, out):
        fail(f"{case}: expected a refusal matching {pattern!r}, got exit {rc}:\n{out[-3000:]}")
    line = next(ln for ln in out.splitlines() if re.search(pattern, ln)).strip()
    print(f"  {case:34} exit {rc}: ...{line[-150:]}")


def main():
    sep = sys.argv.index("--")
    work = os.path.abspath(sys.argv[1])
    launcher, quartet = sys.argv[sep + 1:-1], sys.argv[-1]
    shutil.rmtree(work, ignore_errors=True)
    plain = os.path.join(work, "plain")
    make_model(plain)
    cache = os.path.join(work, "home", "hub")
    snapshot = make_cache(cache, plain)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for p in ["sort 3817=", "sort 90210=", "sort 123="]:
            f.write(json.dumps({"prompt": p}) + "\n")

    # tokenize: the default cache, found through HF_HUB_CACHE or HF_HOME as huggingface_hub finds it.
    text = "sort 90210= 01299\nThe lazy fox\n"
    want = must_run([quartet, "tokenize", plain], stdin=text)
    for env in ({"HF_HUB_CACHE": cache}, {"HF_HOME": os.path.join(work, "home")}):
        got = must_run([quartet, "tokenize", "hf:" + REPO], env=env, stdin=text)
        if got != want:
            fail(f"tokenize through {env}: {got!r} != {want!r} (plain directory)")
    print("  tokenize hf:... through HF_HUB_CACHE and HF_HOME = the plain directory")

    def generate(path, out, extra=()):
        cmd = launcher + ["1", quartet, "generate", "tests/decks/generate.deck", "--set", "placement.actor=1",
                          "--set", f"model.actor.path={path}", "--set", f"rollout.prompts={prompts}",
                          "--set", f"run.out={out}", "--set", "rollout.max_new_tokens=8"]
        for setting in extra:
            cmd += ["--set", setting]
        return cmd

    def completions(out):
        with open(os.path.join(out, "generations.jsonl")) as f:
            return [json.loads(line)["tokens"] for line in f]

    must_run(generate(plain, os.path.join(work, "gen-plain")))
    want = completions(os.path.join(work, "gen-plain"))
    for i, rev in enumerate(("", "@main", "@" + COMMIT)):
        out = os.path.join(work, f"gen-hf-{i}")
        must_run(generate("hf:" + REPO + rev, out, [f"model.hub_cache={cache}"]))
        if completions(out) != want:
            fail(f"generate on hf:{REPO}{rev}: {completions(out)} != {want} (plain directory)")
    print("  generate on hf:... (no revision, @main, @<commit>) = the plain directory, token for token")

    # train records the path as given and the snapshot it became.
    out = os.path.join(work, "train")
    cmd = launcher + ["1", quartet, "train", "inputs/demo.deck"]
    for key, value in {"model.actor.path": "hf:" + REPO, "model.hub_cache": cache, "rollout.prompts": prompts,
                       "run.out": out, "run.iterations": "1", "algorithm.name": "grpo",
                       "algorithm.samples_per_prompt": "2", "rollout.batch": "2", "algorithm.minibatch": "4",
                       "placement.critic": "0", "placement.reference": "0", "algorithm.kl_coef": "0",
                       "checkpoint.at_end": "false", "rollout.max_new_tokens": "6",
                       "rollout.max_prompt_tokens": "16"}.items():
        cmd += ["--set", f"{key}={value}"]
    must_run(cmd)
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        recorded = f.attrs["model_paths"]
        recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
    if f"actor = hf:{REPO} -> {snapshot}" not in recorded:
        fail(f"run.h5 model_paths is {recorded!r}, expected 'actor = hf:{REPO} -> {snapshot}'")
    print(f"  train on hf:... records '{recorded.strip()}'")

    hub = [f"model.hub_cache={cache}"]
    must_refuse("a model not in the cache", generate("hf:tiny-org/absent", work + "/x", hub),
                r"has no models--tiny-org--absent \(it holds other-org/other-model, tiny-org/tiny-llama\).*never downloads")
    must_refuse("a revision not in the cache", generate("hf:" + REPO + "@v2", work + "/x", hub),
                r"revision 'v2' is not in .*/refs \(it holds main, v1\)")
    must_refuse("a commit without a snapshot", generate("hf:" + REPO + "@" + "a" * 40, work + "/x", hub),
                r"no snapshot a{40} in .*snapshots \(it holds " + COMMIT + ", " + INCOMPLETE + r"\)")
    must_refuse("a snapshot without config.json", generate("hf:" + REPO + "@v1", work + "/x", hub),
                r"model\.actor\.path.*the snapshot .*" + INCOMPLETE + r" has no config\.json")
    must_refuse("a cache that is not there", generate("hf:" + REPO, work + "/x"),
                r"the Hugging Face hub cache .*/nowhere/hub \(\$HF_HOME/hub\) does not exist",
                env={"HF_HOME": os.path.join(work, "nowhere")})
    must_refuse("a malformed name", generate("hf:a/b/c", work + "/x", hub), r"'a/b/c' is not a Hub model id")
    must_refuse("tokenize, a model not in the cache", [quartet, "tokenize", "hf:tiny-org/absent"],
                r"has no models--tiny-org--absent", env={"HF_HUB_CACHE": cache})
    print("check_hf_paths: hf: paths resolve in the local cache and every miss is refused by name")


if __name__ == "__main__":
    main()
