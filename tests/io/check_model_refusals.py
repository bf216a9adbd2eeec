"""Bad model directories, prompts and decks are refused by `generate` and `train` alike, by name.

    python check_model_refusals.py WORK -- MPIRUN_WORDS... QUARTET

Builds, with transformers, a tiny Llama and a tiny GPT-2 (each with a byte-level BPE tokenizer
from `tokenizers`), checks that both commands run on the intact directories, then damages copies
one way each and runs `quartet generate` and `quartet train` (one rank, GRPO without a critic or
a reference, one iteration) on every copy. Each run must exit non-zero with a message matching
the case's pattern (naming the tensor, key or file), and no traceback or LibTorch backtrace.
Cases:
  dtype      F32 tensors relabelled I32 (same byte count): one tensor, every tensor
  tensors    a config of 1 layer over a 2-layer file; an extra tensor; a reward model without
             its score head (train); a critic started from the causal LM is accepted, and says so
  tokenizer  a reward model (LlamaForSequenceClassification) runs with the actor's tokenizer and
             with another one (two ids swapped: re-tokenized, as the log says), and is refused
             with none (train)
  sizes      hidden_size 2^62; a tokenizer larger than the model's vocabulary; a GPT-2 prompt
             plus new tokens beyond n_positions
  values     eos/pad ids outside the vocabulary (99999, -3, 2^64-1); bytes appended after the
             safetensors data section; rollout.temperature = inf; algorithm.minibatch > batch;
             every weight NaN; a tokenizer.json vocabulary id of 1e9 (tokenize too)
  families   a model_type quartet does not have (gemma3); a rope scaling it does not have (yarn,
             as transformers 5 writes it and as transformers 4 did)
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification,
                          PreTrainedTokenizerFast)

CORPUS = ["sort 3817= 1378", "add 12+30= 42", "The quick brown fox jumps over the lazy dog.",
          "0123456789 =+-*/ abcdefghijklmnopqrstuvwxyz"] * 20
# What a crash or an unnamed failure prints; a refusal must print none of it.
CRASH = re.compile(r"Traceback|Exception raised from|frame #\d|Segmentation fault|terminate called|"
                   r"index out of range in self|Storage size calculation overflowed")


def fail(msg):
    sys.exit(f"check_model_refusals: {msg}")


def make_tokenizer(out, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    return fast


def make_models(work):
    torch.manual_seed(3)
    llama = os.path.join(work, "llama")
    fast = make_tokenizer(llama, 300)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(llama, safe_serialization=True)
    # A reward model of the same shape and tokenizer.
    reward = os.path.join(work, "llama-reward")
    fast.save_pretrained(reward)
    cfg.num_labels = 1
    LlamaForSequenceClassification(cfg).save_pretrained(reward, safe_serialization=True)
    gpt2 = os.path.join(work, "gpt2")
    fast = make_tokenizer(gpt2, 300)
    cfg = GPT2Config(vocab_size=len(fast), n_embd=32, n_layer=2, n_head=4, n_positions=24,
                     bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    GPT2LMHeadModel(cfg).save_pretrained(gpt2, safe_serialization=True)
    # A tokenizer with more tokens than the models' vocabularies.
    big = make_tokenizer(os.path.join(work, "big-tokenizer"), 400)
    assert len(big) > len(fast), (len(big), len(fast))
    return llama, gpt2


def swap_two_ids(model):
    """Another tokenizer of the same size: two tokens of tokenizer.json trade ids."""
    path = os.path.join(model, "tokenizer.json")
    with open(path) as f:
        spec = json.load(f)
    vocab = spec["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    a, b = by_id[100], by_id[101]
    vocab[a], vocab[b] = 101, 100
    with open(path, "w") as f:
        json.dump(spec, f)
    return a, b


# ---- editing a copy of a model directory ------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_safetensors(path, header, payload):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + payload)


def copy_model(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def edit_config(model, **changes):
    path = os.path.join(model, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(path, "w") as f:
        f.write(json.dumps(cfg, indent=2))


def edit_header(model, edit):
    path = os.path.join(model, "model.safetensors")
    header, payload = read_safetensors(path)
    payload = edit(header, payload)
    write_safetensors(path, header, payload)


def relabel(names_of):
    def edit(header, payload):
        for name in names_of(header):
            assert header[name]["dtype"] == "F32", name
            header[name]["dtype"] = "I32"
        return payload
    return edit


def fill_nan(header, payload):
    """Every F32 tensor's values NaN."""
    data = bytearray(payload)
    nan = struct.pack("<f", float("nan"))
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "F32":
            continue
        begin, end = entry["data_offsets"]
        data[begin:end] = nan * ((end - begin) // 4)
    return bytes(data)


def add_tensor(header, payload):
    end = len(payload)
    header["model.layers.0.mlp.extra_proj.weight"] = {"dtype": "F32", "shape": [2, 2], "data_offsets": [end, end + 16]}
    return payload + bytes(16)


# ---- running quartet --------------------------------------------------------------------------

def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    return p.returncode, p.stdout


class Runner:
    """`quartet generate` or `quartet train` on one model, with deck settings (later ones win)."""

    GENERATE = {"placement.actor": "1", "rollout.temperature": "0"}
    # GRPO on one rank: no critic, no reference, one iteration, no checkpoint.
    TRAIN = {"run.iterations": "1", "algorithm.name": "grpo", "algorithm.samples_per_prompt": "2",
             "rollout.batch": "2", "algorithm.minibatch": "4", "placement.critic": "0", "placement.reference": "0",
             "algorithm.kl_coef": "0", "checkpoint.at_end": "false"}

    def __init__(self, work, launcher, quartet):
        self.work, self.launcher, self.quartet = work, launcher, quartet
        self.prompts = os.path.join(work, "prompts.jsonl")
        with open(self.prompts, "w") as f:
            for p in ["sort 3817=", "add 12+30=", "sort 90210="]:
                f.write(json.dumps({"prompt": p}) + "\n")
        self.count = 0

    def command(self, what, model, extra, np_=1):
        self.count += 1
        settings = dict(self.GENERATE if what == "generate" else self.TRAIN)
        settings.update({"model.actor.path": model, "rollout.prompts": self.prompts, "model.actor.dtype": "float32",
                         "rollout.max_new_tokens": "6", "rollout.max_prompt_tokens": "16",
                         "run.out": os.path.join(self.work, "out", str(self.count))})
        settings.update(extra)
        deck = "tests/decks/generate.deck" if what == "generate" else "inputs/demo.deck"
        cmd = self.launcher + [str(np_), self.quartet, what, deck]
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def runs(self, what, model, extra=None, np_=1, expect=None):
        """Exit 0, printing `expect` (a pattern) when given."""
        rc, text = run(self.command(what, model, extra or {}, np_))
        if rc != 0 or CRASH.search(text) or (expect and not re.search(expect, text)):
            fail(f"{what} on {model} should run (exit 0{', printing ' + expect if expect else ''}); "
                 f"exit {rc}:\n{text[-3000:]}")

    def refuses(self, case, what, model, pattern, extra=None, np_=1):
        rc, text = run(self.command(what, model, extra or {}, np_))
        if rc == 0:
            fail(f"{case}: {what} exited 0, expected a refusal matching {pattern!r}:\n{text[-3000:]}")
        if CRASH.search(text):
            fail(f"{case}: {what} crashed or failed naming nothing (exit {rc}):\n{text[-3000:]}")
        if not re.search(pattern, text):
            fail(f"{case}: {what} exited {rc} without naming the fault ({pattern!r}):\n{text[-3000:]}")
        line = next((ln for ln in text.splitlines() if re.search(pattern, ln)), "").strip()
        print(f"  {case:30} {what:8} exit {rc}: ...{line[-140:]}")


def main():
    sep = sys.argv.index("--")
    work = os.path.abspath(sys.argv[1])
    launcher, quartet = sys.argv[sep + 1:-1], sys.argv[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    llama, gpt2 = make_models(work)
    r = Runner(work, launcher, quartet)
    both = ("generate", "train")

    # The intact models run: every refusal below is the damage's doing.
    # (The demo deck's rollout.micro_batch 8 over these runs' rollout.batch 2: one chunk, said.)
    one_chunk = r"train: rollout\.micro_batch 8 is more than rollout\.batch 2: each generation is one chunk of 2 prompts"
    for what in both:
        r.runs(what, llama, expect=one_chunk if what == "train" else None)
        r.runs(what, gpt2)
    # A critic started from the causal LM starts its value head fresh and says so (PPO, 2 ranks).
    r.runs("train", llama, {"algorithm.name": "ppo", "algorithm.samples_per_prompt": "1", "placement.critic": "1",
                            "model.critic.path": llama, "algorithm.minibatch": "2"}, np_=2,
           expect=r"critic .*starts 'score\.weight', 'score\.bias' fresh")
    print("  the intact models run; a critic from the causal LM starts its score head fresh and says so")

    def damaged(name, base=llama):
        return copy_model(base, os.path.join(work, "damaged", name))

    cases = []
    # 6: integer dtypes
    m = damaged("one_i32")
    edit_header(m, relabel(lambda h: ["model.layers.1.mlp.up_proj.weight"]))
    cases.append(("one tensor relabelled I32", m, r"model\.layers\.1\.mlp\.up_proj\.weight' is an integer tensor", {}))
    m = damaged("all_i32")
    edit_header(m, relabel(lambda h: [k for k in h if k != "__metadata__"]))
    cases.append(("every tensor relabelled I32", m, r"is an integer tensor \(Int\) cannot be a weight", {}))
    # 7: the same loading rules for both commands
    m = damaged("one_layer_config")
    edit_config(m, num_hidden_layers=1)
    cases.append(("1-layer config, 2-layer file", m, r"does not have: 'model\.layers\.1\.", {}))
    m = damaged("extra_tensor")
    edit_header(m, add_tensor)
    cases.append(("an extra tensor", m, r"does not have: 'model\.layers\.0\.mlp\.extra_proj\.weight'", {}))
    # 8: sizes
    m = damaged("huge_hidden")
    edit_config(m, hidden_size=2 ** 62)
    cases.append(("hidden_size 2^62", m, r"hidden_size 4611686018427387904 is larger than any model", {}))
    m = damaged("big_tokenizer")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(work, "big-tokenizer", f), os.path.join(m, f))
    cases.append(("tokenizer beyond vocab_size", m, r"the tokenizer has \d+ tokens but the model's vocab_size is \d+: ids \d+ and above have no embedding", {}))
    # 9: values
    for key, value in (("eos_token_id", 99999), ("eos_token_id", -3), ("pad_token_id", 2 ** 64 - 1)):
        m = damaged(f"{key}_{value}")
        edit_config(m, **{key: value})
        cases.append((f"{key} = {value}", m, rf"{key}.*{value}.*(is not a token of the vocabulary|is out of range)", {}))
    m = damaged("appended_bytes")
    with open(os.path.join(m, "model.safetensors"), "ab") as f:
        f.write(b"\0" * 64)
    cases.append(("bytes after the data section", m, r"model\.safetensors: bytes \[\d+, \d+\) of the data section follow the last tensor", {}))
    # families and options quartet does not have, named with their key and value
    m = damaged("model_type_gemma3")
    edit_config(m, model_type="gemma3", architectures=["Gemma3ForCausalLM"])
    cases.append(("model_type gemma3", m, r"model_type 'gemma3' is not supported \(llama, mistral, qwen2, qwen3, ", {}))
    m = damaged("rope_yarn")
    edit_config(m, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                    "original_max_position_embeddings": 32})
    cases.append(("rope_parameters yarn", m, r"rope_parameters\.rope_type 'yarn' is not supported", {}))
    m = damaged("rope_scaling_yarn_v4")
    edit_config(m, rope_parameters=None, rope_theta=10000.0,
                rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
    cases.append(("rope_scaling yarn (v4 layout)", m, r"rope_scaling\.type 'yarn' is not supported", {}))
    # 7: files that must not pass: a vocabulary id far past the tokens (a dense table of 1e9
    # entries), weights that are all NaN (empty completions, exit 0, before)
    m = damaged("vocab_id_1e9")
    spec_path = os.path.join(m, "tokenizer.json")
    with open(spec_path) as f:
        spec = json.load(f)
    token = next(t for t, i in spec["model"]["vocab"].items() if i == 100)
    spec["model"]["vocab"][token] = 10 ** 9
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    vocab_pattern = r"tokenizer\.json: token '.*' has id 1000000000, far past the \d+ tokens of the file"
    cases.append(("a vocabulary id of 1e9", m, vocab_pattern, {}))
    m = damaged("all_nan")
    edit_header(m, fill_nan)
    cases.append(("every weight NaN", m, r"all_nan: tensor '[^']+' holds \d+ NaN or infinite values", {}))
    cases.append(("rollout.temperature = inf", llama, r"rollout\.temperature is inf: expected a finite number",
                  {"rollout.temperature": "inf"}))
    for case, model, pattern, extra in cases:
        for what in both:
            r.refuses(case, what, model, pattern, extra)
    # `quartet tokenize` reads the same tokenizer: refused too, in bounded memory.
    p = subprocess.run([quartet, "tokenize", os.path.join(work, "damaged", "vocab_id_1e9")], input="sort 12=\n",
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or not re.search(vocab_pattern, p.stderr) or CRASH.search(p.stderr):
        fail(f"tokenize on a vocabulary id of 1e9: exit {p.returncode}:\n{p.stdout[-1000:]}{p.stderr[-2000:]}")
    print(f"  {'a vocabulary id of 1e9':30} tokenize exit {p.returncode}")

    # 8: GPT-2's learned positions (n_positions 24): 16 prompt tokens + 12 new ones do not fit.
    r.refuses("prompt + new > n_positions", "train", gpt2, r"model\.actor\.path .*24 learned positions.*= 28",
              {"rollout.max_new_tokens": "12"})
    r.refuses("prompt + new > n_positions", "generate", gpt2, r"rollout\.max_new_tokens is 30, and the prompt on .*has \d+ tokens",
              {"rollout.max_new_tokens": "30"})
    # 7: a reward model must bring its head: the causal LM is not a reward model.
    r.refuses("reward model without score", "train", llama, r"tensor 'score\.weight' is missing .*not a sequence_reward model",
              {"model.reward.path": llama, "model.reward.kind": "model", "placement.reward": "1"}, np_=2)
    # A reward model with the actor's tokenizer reads the actor's ids; with another (two ids
    # swapped) it reads the rollouts as text, and says so with what differs; with none, refused.
    with_reward = {"model.reward.kind": "model", "placement.reward": "1"}
    reward = os.path.join(work, "llama-reward")
    r.runs("train", llama, dict(with_reward, **{"model.reward.path": reward}), np_=2,
           expect=r"reward model: reads the actor's token ids")
    m = copy_model(reward, os.path.join(work, "damaged", "reward_other_tokenizer"))
    a, b = swap_two_ids(m)
    r.runs("train", llama, dict(with_reward, **{"model.reward.path": m}), np_=2,
           expect=rf"reward model: its tokenizer is not the actor's \(id 100 is '{re.escape(a)}' for the actor but "
                  rf"'{re.escape(b)}' here \(and 1 more ids differ\)\): each completion is decoded to text")
    m = copy_model(reward, os.path.join(work, "damaged", "reward_no_tokenizer"))
    os.remove(os.path.join(m, "tokenizer.json"))
    r.refuses("reward without tokenizer.json", "train", llama,
              r"model\.reward\.path is '.*reward_no_tokenizer', which has no tokenizer\.json: quartet can neither",
              dict(with_reward, **{"model.reward.path": m}), np_=2)
    # 9: a minibatch larger than an actor rank's sequences (2 prompts x 2 samples).
    r.refuses("minibatch > batch", "train", llama, r"algorithm\.minibatch is 8, more than the 4 sequences",
              {"algorithm.minibatch": "8"})
    print(f"check_model_refusals: {r.count} runs, every damaged directory and bad value refused by name")


if __name__ == "__main__":
    main()
