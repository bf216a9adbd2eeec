"""Prepared demonstrations end to end (docs/sft.md): inputs/prepare/prepare_sft.py against
transformers, then `quartet sft` on what it wrote, and the refusals by file and line.

    check_prepared_sft.py WORK --quartet build/quartet --mpirun 'mpirun|--oversubscribe|-np'

Built here, nothing fetched (the tokenizers and tiny Llamas of tests/data/check_prepared_prompts.py):
the byte-level BPE tokenizer with a Llama-3-shaped template that marks the assistant's text with
{% generation %} (gen/), the same without the marks (model/), a ChatML template (chatml/), and
another tokenizer (other_tok/). Checked:
  - every chat's ids equal apply_chat_template(messages, tokenize=True), its loss mask found by
    turns equals transformers' return_assistant_tokens_mask (gen/), and --assistant-mask template
    writes the same rows; the prompt is apply_chat_template(messages[:-1], add_generation_prompt=True);
  - with ChatML (no marks) the masked tokens are every assistant turn's text and its <|im_end|>\\n;
  - bad rows are refused by file and line (--on-error fail) or counted (skip); a template without
    marks is refused for --assistant-mask template;
  - for a random: actor, a file prepared from `quartet tokenize random: --write-files` trains
    exactly as the plain file does (run.h5 bitwise); `quartet sft` runs on an HF model's prepared
    chats, and refuses a file prepared for another tokenizer.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA3_GENERATION_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
CHATS = [
    [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "How many clips?"},
     {"role": "assistant", "content": "48 + 24 = 72 clips.\n#### 72"}],
    [{"role": "user", "content": "Sort the digits: 3 1 2"}, {"role": "assistant", "content": "1 2 3"},
     {"role": "user", "content": "And 9 4 7?"}, {"role": "assistant", "content": "4 7 9"}],
    [{"role": "user", "content": "Grüße aus München! 🚀"}, {"role": "assistant", "content": "Hallo!"}],
]
passed = 0


def check(cond, what):
    global passed
    if not cond:
        sys.exit(f"check_prepared_sft: FAILED: {what}")
    passed += 1


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SOURCE, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare(module, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = module.main([str(a) for a in argv])
    return rc, out.getvalue()


def read_prepared(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines[0], lines[1:]


def write_data(work):
    jsonl = os.path.join(work, "chats.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for k, chat in enumerate(CHATS):
            f.write(json.dumps({"messages": chat, "id": k}, ensure_ascii=False) + "\n")
        f.write(json.dumps({"prompt": "Sort 9 8 7", "response": "7 8 9", "id": "pair"}) + "\n")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    table = pa.table({"messages": [CHATS[0], CHATS[1]], "source": ["a", "b"]},
                     schema=pa.schema([("messages", pa.list_(message)), ("source", pa.string())]))
    parquet = os.path.join(work, "chats.parquet")
    pq.write_table(table, parquet)
    return jsonl, parquet


def check_against_transformers(prep, gen, jsonl, parquet, work):
    out = os.path.join(work, "gen_turns.jsonl")
    rc, text = prepare(prep, "--model", gen, "--out", out, "--assistant-mask", "turns", jsonl, parquet)
    check(rc == 0, f"prepare_sft on gen/ (turns): {text}")
    header, rows = read_prepared(out)
    check(header["quartet_sft"] == 1 and header["assistant_mask"] == "turns" and header["chat_template"]["applied"],
          f"header {header}")
    check(len(rows) == 6, f"6 rows, not {len(rows)}")
    hf = AutoTokenizer.from_pretrained(gen, local_files_only=True)
    for r in rows:
        want = hf.apply_chat_template(r["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        check(r["input_ids"] == list(want["input_ids"]), f"{r['origin']}: ids are apply_chat_template's")
        check(r["loss_mask"] == list(want["assistant_masks"]),
              f"{r['origin']}: the mask by turns {r['loss_mask']} is transformers' {list(want['assistant_masks'])}")
        prompt = hf.apply_chat_template(r["messages"][:-1], add_generation_prompt=True, tokenize=True, return_dict=False)
        check(r["input_ids"][:r["prompt_length"]] == prompt and r["prompt_length"] == len(prompt),
              f"{r['origin']}: the prompt is the chat before the final reply with the generation prompt")
        check(r["response"] == r["messages"][-1]["content"], f"{r['origin']}: the response")
    pair = [r for r in rows if r["metadata"].get("id") == "pair"][0]
    check(pair["messages"][-1] == {"role": "assistant", "content": "7 8 9"}, "a prompt/response row as a chat")
    out2 = os.path.join(work, "gen_auto.jsonl")
    rc, text = prepare(prep, "--model", gen, "--out", out2, jsonl, parquet)
    header2, rows2 = read_prepared(out2)
    check(rc == 0 and header2["assistant_mask"] == "template", f"auto takes the template's marks: {text}")
    check([(r["input_ids"], r["loss_mask"], r["prompt_length"]) for r in rows2] ==
          [(r["input_ids"], r["loss_mask"], r["prompt_length"]) for r in rows], "the template's mask writes the same rows")
    return out


def check_chatml(prep, chatml, jsonl, work):
    out = os.path.join(work, "chatml.jsonl")
    rc, text = prepare(prep, "--model", chatml, "--out", out, jsonl)
    header, rows = read_prepared(out)
    check(rc == 0 and header["assistant_mask"] == "turns", f"ChatML: auto is turns: {text}")
    hf = AutoTokenizer.from_pretrained(chatml, local_files_only=True)
    for r in rows:
        learnt = hf.decode([i for i, m in zip(r["input_ids"], r["loss_mask"]) if m])
        want = "".join(m["content"] + "<|im_end|>\n" for m in r["messages"] if m["role"] == "assistant")
        check(learnt == want, f"{r['origin']}: the masked tokens are {learnt!r}, expected {want!r}")


def check_refusals(prep, model_dir, work):
    rc, text = prepare(prep, "--model", model_dir, "--out", os.path.join(work, "x.jsonl"), "--assistant-mask", "template",
                       os.path.join(work, "chats.jsonl"))
    check(rc == 1 and "has no {% generation %} block" in text, f"--assistant-mask template without marks: {text}")
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w", encoding="utf-8") as f:
        f.write(json.dumps({"messages": CHATS[2]}) + "\n")
        f.write(json.dumps({"messages": CHATS[2][:1]}) + "\n")
        f.write(json.dumps({"prompt": "a", "response": 3}) + "\n")
        f.write(json.dumps({"text": "b"}) + "\n")
    for line, needle in [(2, "'messages' ends with a user message, not the assistant's reply"),
                         (3, "'response' is an int, not a string"), (4, "neither 'messages' nor 'prompt' and 'response'")]:
        lines = open(bad, encoding="utf-8").read().splitlines()
        one = os.path.join(work, f"bad{line}.jsonl")
        with open(one, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:1] + [lines[line - 1]]) + "\n")
        rc, text = prepare(prep, "--model", model_dir, "--out", os.path.join(work, "y.jsonl"), one)
        check(rc == 1 and f"bad{line}.jsonl:2: {needle}" in text, f"bad row {line}: {text}")
    rc, text = prepare(prep, "--model", model_dir, "--out", os.path.join(work, "z.jsonl"), "--on-error", "skip", bad)
    check(rc == 0 and "skipped 3 of 4 rows" in text, f"--on-error skip: {text}")


def run(cmd, expect_ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=SOURCE)
    text = p.stdout + p.stderr
    check((p.returncode == 0) == expect_ok, f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{text[-3000:]}")
    return text


def metrics(out):
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        s = {k: np.asarray(f["metrics"][k][()]) for k in f["metrics"] if not k.startswith("time_") and k != "tokens_per_s"}
        for k in f["eval"]:
            s["eval/" + k] = np.asarray(f["eval"][k][()])
    return s


def check_builtin(args, prep, work):
    files = os.path.join(work, "builtin")
    run([args.quartet, "tokenize", "random:", "--write-files", files])
    data = os.path.join(SOURCE, "inputs/prompts/sort_digits.jsonl")
    heldout = os.path.join(SOURCE, "inputs/prompts/sort_digits_heldout.jsonl")
    prepared, prepared_heldout = os.path.join(work, "sort_digits.sft.jsonl"), os.path.join(work, "heldout.sft.jsonl")
    for src, dst in ((data, prepared), (heldout, prepared_heldout)):
        rc, text = prepare(prep, "--model", files, "--out", dst, "--response-column", "answer", src)
        check(rc == 0, f"prepare_sft with the built-in tokenizer: {text}")
    deck = os.path.join(SOURCE, "inputs/sft/sort_digits.deck")
    outs = {}
    for name, d, h in (("plain", data, heldout), ("prepared", prepared, prepared_heldout)):
        outs[name] = os.path.join(work, "sft_" + name)
        run(args.mpirun + ["2", args.quartet, "sft", deck, "--set", f"run.out={outs[name]}", "--set", "sft.steps=12",
                           "--set", "sft.eval_every=6", "--set", f"sft.data={d}", "--set", f"sft.heldout={h}"])
    a, b = metrics(outs["plain"]), metrics(outs["prepared"])
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          "sft on the built-in tokenizer's prepared file equals sft on the plain file, bitwise")


def check_sft_hf(args, prep, gen, other, jsonl, work):
    prepared = os.path.join(work, "gen_turns.jsonl")
    deck = os.path.join(SOURCE, "inputs/sft/sort_digits.deck")
    common = ["--set", f"model.actor.path={gen}", "--set", "placement.actor=1", "--set", "sft.max_tokens=128",
              "--set", "sft.steps=3", "--set", "sft.batch=3", "--set", "sft.response_field=response"]
    text = run(args.mpirun + ["1", args.quartet, "sft", deck, "--set", f"run.out={work}/sft_hf", "--set",
                              f"sft.data={prepared}", "--set", f"sft.heldout={prepared}"] + common)
    check("eval step 3 | heldout loss" in text and "sft: done" in text, f"sft on prepared chats:\n{text[-2000:]}")
    foreign = os.path.join(work, "other.jsonl")
    # other_tok has no template: its chats are refused, the prompt/response row is prepared raw.
    rc, out = prepare(prep, "--model", other, "--out", foreign, "--on-error", "skip", jsonl)
    check(rc == 0, f"prepare_sft for other_tok: {out}")
    text = run(args.mpirun + ["1", args.quartet, "sft", deck, "--set", f"run.out={work}/sft_other", "--set",
                              f"sft.data={foreign}", "--set", f"sft.heldout={prepared}"] + common, expect_ok=False)
    check("sft.data names a file prepared for another actor" in text, f"a file for another tokenizer:\n{text[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--quartet", required=True)
    ap.add_argument("--mpirun", required=True, help="the launcher's words up to the rank count, joined by '|'")
    args = ap.parse_args()
    args.mpirun = args.mpirun.split("|")
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prompts_check = load("tests/data/check_prepared_prompts.py", "check_prepared_prompts")
    prep = load("inputs/prepare/prepare_sft.py", "prepare_sft")
    model_dir, chatml, other, _ = prompts_check.make_models(work)
    gen = os.path.join(work, "gen")
    shutil.copytree(model_dir, gen)
    with open(os.path.join(gen, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(LLAMA3_GENERATION_TEMPLATE)
    jsonl, parquet = write_data(work)
    check_against_transformers(prep, gen, jsonl, parquet, work)
    check_chatml(prep, chatml, jsonl, work)
    check_refusals(prep, model_dir, work)
    check_builtin(args, prep, work)
    check_sft_hf(args, prep, gen, other, jsonl, work)
    print(f"check_prepared_sft: {passed} checks passed")


if __name__ == "__main__":
    main()
