"""Prepared prompts end to end (docs/data.md): inputs/prepare/prepare_prompts.py against
transformers, then `quartet train` on what it wrote, and every refusal by file and line.

    check_prepared_prompts.py WORK --quartet build/quartet --mpirun 'mpirun|--oversubscribe|-np'

Built here, nothing fetched: a byte-level BPE tokenizer (Llama-3-style specials, a BOS the
post-processor adds) with a Llama-3-shaped chat template in chat_template.jinja, on a tiny random
Llama; the same tokenizer with a ChatML template in tokenizer_config.json; another tokenizer.
Data: a JSONL file and a Parquet file with messages, prompt, answer and metadata rows, and a
directory of shards (Parquet and an Arrow stream). Checked:
  - every prepared row's ids equal apply_chat_template(messages, add_generation_prompt=True,
    tokenize=True) (raw prompts: the tokenizer with its special tokens), the header's digests
    equal the files', answers and metadata are kept as given;
  - bad rows are refused by file and line (--on-error fail) or counted (skip);
  - `quartet train` runs on the prepared file with the prepared ids at the head of its rollouts,
    and evaluates on it as [eval]'s held-out prompts (one for another tokenizer is refused there
    too, naming eval.prompts);
  - train refuses a file prepared for another tokenizer, another chat template, with an id past
    the vocabulary, with a malformed header or a bad row, each naming the file and line;
  - for a random: actor, a file prepared from `quartet tokenize random: --write-files` trains
    exactly as the plain prompts file does (rollouts equal bitwise), and one prepared for an HF
    tokenizer is refused.
"""
import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|im_start|>", "<|im_end|>"]
CORPUS = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
          "How many clips did Natalia sell altogether in April and May? #### 72",
          "You are a helpful assistant. Answer with a number.", "Sort the digits: 3 1 2 -> 1 2 3",
          "Grüße aus München! 数字を並べ替えてください。 🚀"] * 10

passed = 0


def check(cond, what):
    global passed
    if not cond:
        sys.exit(f"check_prepared_prompts: FAILED: {what}")
    passed += 1


def make_tokenizer(vocab_size, corpus):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   pad_token="<|end_of_text|>", clean_up_tokenization_spaces=False)


def make_models(work):
    """model/ (Llama-3 template in chat_template.jinja), chatml/ (the same tokenizer, a ChatML
    template in tokenizer_config.json), other_tok/ (another tokenizer)."""
    torch.manual_seed(5)
    model_dir, chatml, other = (os.path.join(work, n) for n in ("model", "chatml", "other_tok"))
    fast = make_tokenizer(400, CORPUS)
    fast.chat_template = LLAMA3_TEMPLATE
    fast.save_pretrained(model_dir)
    check(os.path.isfile(os.path.join(model_dir, "chat_template.jinja")), "transformers wrote chat_template.jinja")
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False)
    LlamaForCausalLM(config).eval().save_pretrained(model_dir, safe_serialization=True)

    shutil.copytree(model_dir, chatml)
    os.remove(os.path.join(chatml, "chat_template.jinja"))
    with open(os.path.join(chatml, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["chat_template"] = CHATML_TEMPLATE
    with open(os.path.join(chatml, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)

    make_tokenizer(350, CORPUS[::-1] + ["another corpus, another vocabulary"] * 5).save_pretrained(other)
    return model_dir, chatml, other, len(fast)


def write_data(work):
    jsonl = os.path.join(work, "data.jsonl")
    rows = [
        {"messages": [{"role": "system", "content": "Answer with a number."},
                      {"role": "user", "content": "How many clips did Natalia sell?"}],
         "answer": "Natalia sold 48/2 = 24 clips in May.\n#### 72", "id": "gsm8k-0", "level": 2},
        {"messages": [{"role": "user", "content": "Sort the digits: 3 1 2"}], "answer": "1 2 3",
         "tags": ["sort", "easy"], "extra": {"nested": [1, 2.5, None]}},
        {"prompt": "Grüße aus München! 🚀 How many?", "answer": 72, "id": "num-answer"},
        {"prompt": "No answer here.", "id": "no-answer"},
    ]
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r, ensure_ascii=False) for r in rows[:2]) + "\n\n")  # a blank line
        f.write("\n".join(json.dumps(r, ensure_ascii=False) for r in rows[2:]) + "\n")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("messages", pa.list_(message)), ("prompt", pa.string()), ("answer", pa.string()),
                        ("source", pa.string()), ("score", pa.float64())])
    table = pa.table({
        "messages": [[{"role": "user", "content": "What is 6 * 12?"}], None,
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sort 9 4 7"}]],
        "prompt": [None, "Sort the digits: 9 8 7", None],
        "answer": ["#### 72", "7 8 9", None],
        "source": ["a", "b", "c"],
        "score": [0.5, float("nan"), 1.0],
    }, schema=schema)
    parquet = os.path.join(work, "data.parquet")
    pq.write_table(table, parquet)
    shards = os.path.join(work, "shards")
    os.makedirs(shards, exist_ok=True)
    pq.write_table(table.slice(0, 2), os.path.join(shards, "train-00000.parquet"))
    with pa.ipc.new_stream(os.path.join(shards, "train-00001.arrow"), schema) as w:  # as `datasets` writes
        w.write_table(table.slice(2, 1))
    return jsonl, parquet, shards, len(rows) + 3


def load_prepare():
    spec = importlib.util.spec_from_file_location("prepare_prompts",
                                                  os.path.join(SOURCE, "inputs/prepare/prepare_prompts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare(module, *argv):
    """(exit code, stdout + stderr) of prepare_prompts.py's main, run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = module.main([str(a) for a in argv])
    return rc, out.getvalue()


def read_prepared(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines[0], lines[1:]


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_against_transformers(model_dir, header, rows, n_rows):
    hf = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    check(header["quartet_prompts"] == 1, "header version 1")
    check(header["tokenizer"]["sha256"] == sha256_file(os.path.join(model_dir, "tokenizer.json")),
          "header: the SHA-256 of tokenizer.json")
    ct = header["chat_template"]
    check(ct["applied"] and ct["source"].endswith("chat_template.jinja"), f"header: the template applied, {ct}")
    check(ct["sha256"] == hashlib.sha256(LLAMA3_TEMPLATE.encode()).hexdigest(), "header: the template's SHA-256")
    check(len(rows) == n_rows, f"{n_rows} rows prepared, not {len(rows)}")
    for r in rows:
        want = hf.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
        check(r["prompt_ids"] == want, f"{r['origin']}: ids {r['prompt_ids']} are apply_chat_template's {want}")
        check(r["prompt"] == hf.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False),
              f"{r['origin']}: the rendered text")
        check(r["prompt_ids"].count(hf.bos_token_id) == 1, f"{r['origin']}: one BOS (the template's)")
    by_origin = {r["origin"].rsplit("/", 1)[-1]: r for r in rows}
    gsm = by_origin["data.jsonl:1"]
    check(gsm["answer"] == "Natalia sold 48/2 = 24 clips in May.\n#### 72", "a GSM8K answer kept as given")
    check(gsm["metadata"] == {"id": "gsm8k-0", "level": 2}, f"metadata kept: {gsm['metadata']}")
    check(by_origin["data.jsonl:2"]["metadata"]["extra"] == {"nested": [1, 2.5, None]}, "nested metadata kept")
    check(by_origin["data.jsonl:4"]["answer"] == "72", "a number answer written as a string")
    check(by_origin["data.jsonl:4"]["messages"] == [{"role": "user", "content": "Grüße aus München! 🚀 How many?"}],
          "a prompt row wrapped as one user message")
    check("answer" not in by_origin["data.jsonl:5"], "a row without an answer has none")
    check(by_origin["data.parquet: row 1"]["metadata"] == {"source": "b", "score": None}, "Parquet metadata (NaN: null)")
    check(by_origin["data.parquet: row 2"]["messages"][0]["role"] == "system", "Parquet messages kept")


def check_raw_and_system(module, work, model_dir, jsonl):
    hf = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    raw = os.path.join(work, "raw.jsonl")
    rc, out = prepare(module, "--model", model_dir, "--out", raw, "--prompt-format", "raw", "--system-prompt",
                      "Be exact.", jsonl)
    check(rc == 0, f"raw prepare: {out}")
    header, rows = read_prepared(raw)
    check(header["chat_template"]["applied"], "messages rows still go through the template")
    for r in rows:
        if "messages" in r:
            check(r["messages"][0] == {"role": "system", "content": "Be exact."} or
                  r["messages"][0]["content"] == "Answer with a number.", f"{r['origin']}: the system prompt")
            want = hf.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
            check(r["prompt_ids"] == want, f"{r['origin']}: ids with the system prompt")
        else:
            check(r["prompt_ids"] == hf(r["prompt"])["input_ids"] and r["prompt_ids"][0] == hf.bos_token_id,
                  f"{r['origin']}: a raw prompt with the tokenizer's BOS")
    return raw


def check_prepare_refusals(module, work, model_dir):
    bad = os.path.join(work, "bad.jsonl")
    rows = ['{"prompt": "fine"}', '{"question": "no prompt column"}', '{"prompt": 5}', '{"messages": []}',
            '{"messages": [{"role": "user"}]}', '{"prompt": "' + "long " * 80 + '"}',
            '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
            'not json', '{"prompt": "x", "answer": [1]}']
    with open(bad, "w") as f:
        f.write("\n".join(rows) + "\n")
    out_path = os.path.join(work, "bad_prepared.jsonl")
    rc, out = prepare(module, "--model", model_dir, "--out", out_path, "--max-prompt-tokens", "64", bad)
    check(rc == 1 and f"{bad}:2: neither 'messages' nor 'prompt'" in out and not os.path.exists(out_path),
          f"--on-error fail stops at the first bad row, naming file and line: {out}")
    rc, out = prepare(module, "--model", model_dir, "--out", out_path, "--max-prompt-tokens", "64",
                      "--on-error", "skip", bad)
    for line, what in [(2, "neither 'messages' nor 'prompt'"), (3, "'prompt' is an int, not a string"),
                       (4, "'messages' is an empty chat"), (5, "'messages'[0] has no 'content'"),
                       (6, "more than --max-prompt-tokens 64"), (7, "ends with an assistant message"),
                       (8, "not JSON"), (9, "'answer' is a list")]:
        named = [ln for ln in out.splitlines() if ln.startswith(f"prepare_prompts: skipped {bad}:{line}: ")]
        check(len(named) == 1 and what in named[0], f"skip names {bad}:{line}: {what}: {out}")
    check("skipped 8 of 9 rows" in out and rc == 0, f"skip counts the bad rows: {out}")
    check(len(read_prepared(out_path)[1]) == 1 and read_prepared(out_path)[0]["skipped"] == 8, "one row kept")
    rc, out = prepare(module, "--model", model_dir, "--out", out_path, "--final-assistant", "drop",
                      bad, "--on-error", "skip")
    kept = [r for r in read_prepared(out_path)[1] if r["metadata"].get("final_assistant") == "a"]
    check(len(kept) == 1 and kept[0]["messages"] == [{"role": "user", "content": "q"}],
          "--final-assistant drop keeps the chat before the reply")
    rc, out = prepare(module, "--model", os.path.join(work, "nowhere"), "--out", out_path, bad)
    check(rc == 1 and "not a directory" in out, f"a missing model directory: {out}")


# ---- quartet ------------------------------------------------------------------------------------

def run(cmd, expect_ok):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=SOURCE, timeout=300)
    text = p.stdout + p.stderr
    if expect_ok and (p.returncode != 0 or "train: done" not in p.stdout):
        sys.exit(f"check_prepared_prompts: FAILED: {' '.join(cmd)} exited {p.returncode}:\n{text}")
    if not expect_ok and p.returncode == 0:
        sys.exit(f"check_prepared_prompts: FAILED: {' '.join(cmd)} should have been refused:\n{text}")
    return text


def train_hf(args, np_, prompts, model_dir, vocab, out, extra=(), expect_ok=True):
    cmd = args.mpirun + [str(np_), args.quartet, "train", os.path.join(SOURCE, "tests/decks/train_prepared.deck"),
                         "--set", f"model.actor.path={model_dir}", "--set", f"model.reward.vocab={vocab}",
                         "--set", f"rollout.prompts={prompts}", "--set", f"run.out={out}", *extra]
    shutil.rmtree(out, ignore_errors=True)
    return run(cmd, expect_ok)


def refused(text, *parts):
    return all(p in text for p in parts)


def check_train(args, work, model_dir, chatml, other, vocab, prepared, module, jsonl):
    out = os.path.join(work, "run")
    train_hf(args, 1, prepared, model_dir, vocab, out)
    _, rows = read_prepared(prepared)
    ids = {tuple(r["prompt_ids"]) for r in rows}
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        first = f["rollouts"][sorted(f["rollouts"].keys(), key=int)[0]]
        seqs, masks = first["sequences"][()], first["attention_mask"][()]
        width = seqs.shape[1] - first["action_mask"].shape[1]
        # Left-padded prompts: the real prompt tokens of each row are one of the prepared rows.
        found = [tuple(int(t) for t, m in zip(s[:width], mk[:width]) if m) for s, mk in zip(seqs, masks)]
    check(found and all(p in ids for p in found), f"the rollouts begin with the prepared ids: {found[:2]}")
    # A prepared file (answers and all) as [eval]'s held-out prompts: every row evaluated.
    out = os.path.join(work, "run_eval")
    train_hf(args, 1, prepared, model_dir, vocab, out, extra=("--set", f"eval.prompts={prepared}"))
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        evaluated = list(f["eval"]["prompts"][()]) if "eval" in f else []
    check(evaluated == [len(rows)], f"[eval] on the prepared file evaluated {evaluated} prompts, expected [{len(rows)}]")

    # quartet generate takes the prepared ids too: greedy completions equal transformers' on them.
    gen = os.path.join(work, "generate")
    shutil.rmtree(gen, ignore_errors=True)
    p = subprocess.run(args.mpirun + ["1", args.quartet, "generate", os.path.join(SOURCE, "tests/decks/generate.deck"),
                                      "--set", "placement.actor=1", "--set", "rollout.max_new_tokens=4",
                                      "--set", f"model.actor.path={model_dir}", "--set", f"rollout.prompts={prepared}",
                                      "--set", f"run.out={gen}"], capture_output=True, text=True, cwd=SOURCE)
    check(p.returncode == 0, f"quartet generate on the prepared file:\n{p.stdout}{p.stderr}")
    with open(os.path.join(gen, "generations.jsonl")) as f:
        generations = [json.loads(line) for line in f]
    hf_model = LlamaForCausalLM.from_pretrained(model_dir).eval()
    for g, r in zip(generations, rows):
        check(g["prompt_tokens"] == len(r["prompt_ids"]), f"{r['origin']}: generate used the prepared ids")
        with torch.no_grad():
            out = hf_model.generate(torch.tensor([r["prompt_ids"]]), do_sample=False, max_new_tokens=4,
                                    pad_token_id=hf_model.config.pad_token_id)
        want = out[0, len(r["prompt_ids"]):].tolist()
        check(g["tokens"] == want[: len(g["tokens"])] and len(g["tokens"]) > 0,
              f"{r['origin']}: greedy tokens {g['tokens']} are transformers' {want}")

    def expect(prompts, *parts, model=model_dir, name="refused"):
        text = train_hf(args, 1, prompts, model, vocab, os.path.join(work, name), expect_ok=False)
        check(refused(text, *parts), f"train refuses {prompts}, naming {parts}:\n{text}")

    other_file = os.path.join(work, "for_other_tokenizer.jsonl")
    # The other tokenizer has no chat template: its file holds the raw prompt rows alone.
    rc, out = prepare(module, "--model", other, "--out", other_file, "--on-error", "skip", jsonl)
    check(rc == 0 and "skipped 2 of 4 rows" in out, f"prepare for another tokenizer: {out}")
    expect(other_file, "rollout.prompts", f"{other_file}:1", f"{other}/tokenizer.json (sha256",
           f"the actor's tokenizer is {model_dir}/tokenizer.json (sha256")
    text = train_hf(args, 1, prepared, model_dir, vocab, os.path.join(work, "refused_eval"),
                    extra=("--set", f"eval.prompts={other_file}"), expect_ok=False)
    check(refused(text, "eval.prompts", f"{other_file}:1", f"{other}/tokenizer.json (sha256"),
          f"train refuses eval.prompts = {other_file}, a file for another tokenizer:\n{text}")
    chatml_file = os.path.join(work, "for_chatml.jsonl")
    rc, out = prepare(module, "--model", chatml, "--out", chatml_file, jsonl)
    check(rc == 0, f"prepare with the ChatML template: {out}")
    expect(chatml_file, f"{chatml_file}:1", f"chat template of {chatml}/tokenizer_config.json (sha256",
           f"the actor's chat template, {model_dir}/chat_template.jinja, is another")
    # The ChatML directory's own prompts fit it (same tokenizer, its template).
    train_hf(args, 1, chatml_file, chatml, vocab, os.path.join(work, "run_chatml"))

    with open(prepared, encoding="utf-8") as f:
        lines = f.read().splitlines()
    def variant(name, edit):
        path = os.path.join(work, name)
        copy = list(lines)
        edit(copy)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(copy) + "\n")
        return path

    def past_vocab(ls):
        row = json.loads(ls[2])
        row["prompt_ids"][1] = vocab + 5
        ls[2] = json.dumps(row)
    expect(variant("past_vocab.jsonl", past_vocab), f"past_vocab.jsonl:3: prompt_ids[1] = {vocab + 5}",
           f"outside the actor tokenizer's vocabulary of {vocab}")

    def bad_header(ls):
        h = json.loads(ls[0])
        h["tokenizer"]["sha256"] = "not a digest"
        ls[0] = json.dumps(h)
    expect(variant("bad_header.jsonl", bad_header), "bad_header.jsonl:1: a malformed prepared-prompts header",
           "tokenizer.sha256")

    def bad_row(ls):
        row = json.loads(ls[3])
        del row["prompt_ids"]
        ls[3] = json.dumps(row)
    expect(variant("bad_row.jsonl", bad_row), "bad_row.jsonl:4: no \"prompt_ids\" list")


def check_builtin(args, work, module, model_dir):
    """random: actors: the built-in tokenizer's files, prepared raw prompts equal to the plain file."""
    builtin = os.path.join(work, "builtin")
    p = subprocess.run([args.quartet, "tokenize", "random:", "--write-files", builtin], capture_output=True, text=True)
    check(p.returncode == 0, f"quartet tokenize random: --write-files: {p.stderr}")
    plain = os.path.join(work, "sort_digits.jsonl")
    with open(os.path.join(SOURCE, "inputs/prompts/sort_digits.jsonl")) as src, open(plain, "w") as dst:
        dst.writelines(src.readlines()[:64])
    prepared = os.path.join(work, "sort_digits_prepared.jsonl")
    rc, out = prepare(module, "--model", builtin, "--out", prepared, plain)
    check(rc == 0 and not read_prepared(prepared)[0]["chat_template"]["applied"], f"builtin prepare: {out}")

    def demo(prompts, name, expect_ok=True):
        out = os.path.join(work, name)
        shutil.rmtree(out, ignore_errors=True)
        return out, run(args.mpirun + ["3", args.quartet, "train", os.path.join(SOURCE, "inputs/demo.deck"),
                                       "--set", "run.iterations=2", "--set", "rollout.batch=8",
                                       "--set", "rollout.micro_batch=4", "--set", "algorithm.minibatch=8",
                                       "--set", "output.rollouts_every=1", "--set", f"rollout.prompts={prompts}",
                                       "--set", f"run.out={out}"], expect_ok)
    a, _ = demo(plain, "demo_plain")
    b, _ = demo(prepared, "demo_prepared")
    with h5py.File(os.path.join(a, "run.h5"), "r") as fa, h5py.File(os.path.join(b, "run.h5"), "r") as fb:
        for it in fa["rollouts"]:
            for k in ("sequences", "logprobs", "scores", "advantages"):
                check(np.array_equal(fa["rollouts"][it][k][()], fb["rollouts"][it][k][()]),
                      f"iteration {it}: {k} of the prepared file equal the plain file's")
    hf_file = os.path.join(work, "for_hf.jsonl")
    rc, out = prepare(module, "--model", model_dir, "--out", hf_file, "--prompt-format", "raw", plain)
    check(rc == 0, f"prepare sort_digits for the HF tokenizer: {out}")
    _, text = demo(hf_file, "demo_refused", expect_ok=False)
    check(refused(text, "rollout.prompts", f"{hf_file}:1", f"{model_dir}/tokenizer.json",
                  "quartet's built-in character tokenizer"), f"a random: actor refuses an HF file:\n{text}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--quartet", required=True)
    ap.add_argument("--mpirun", required=True, help="the launcher's words up to the rank count, joined by '|'")
    args = ap.parse_args()
    args.mpirun = args.mpirun.split("|")
    args.quartet = os.path.abspath(args.quartet)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    model_dir, chatml, other, vocab = make_models(work)
    jsonl, parquet, shards, n_rows = write_data(work)
    module = load_prepare()
    prepared = os.path.join(work, "prepared.jsonl")
    rc, out = prepare(module, "--model", model_dir, "--out", prepared, jsonl, parquet, shards)
    check(rc == 0, f"prepare_prompts: {out}")
    header, rows = read_prepared(prepared)
    check_against_transformers(model_dir, header, rows, n_rows + 3)
    check([s["format"] for s in header["source"]] == ["jsonl", "parquet", "parquet", "arrow"],
          f"the shards directory read in name order: {header['source']}")
    check_raw_and_system(module, work, model_dir, jsonl)
    check_prepare_refusals(module, work, model_dir)
    check_train(args, work, model_dir, chatml, other, vocab, prepared, module, jsonl)
    check_builtin(args, work, module, model_dir)
    print(f"check_prepared_prompts: {passed} checks passed")


if __name__ == "__main__":
    main()
