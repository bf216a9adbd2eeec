"""Prepared preference pairs end to end (docs/data.md, "Pair files"): inputs/prepare/prepare_pairs.py
against transformers, then what quartet reads from what it wrote, and every refusal by file and line.

    check_prepared_pairs.py WORK --probe build/tests/data/pairs_probe --quartet build/quartet

The models and tokenizers are check_prepared_prompts.py's (built here, nothing fetched): a
byte-level BPE tokenizer with a Llama-3-shaped chat template, the same tokenizer with a ChatML
template, another tokenizer. Data: JSONL rows in each shape the field uses (text, a chat with an
explicit prompt, chats with an implicit prompt, Anthropic HH transcripts, one and several turns)
and a Parquet file of chats. Checked:
  - every prepared pair's prompt ids equal apply_chat_template(prompt, add_generation_prompt=True,
    tokenize=True), and prompt + response ids equal apply_chat_template(prompt + [reply],
    tokenize=True), for the chosen and the rejected side; the texts are the rendered ones; HH
    transcripts become user and assistant messages; margins kept; the header's digests;
  - raw rows: the prompt with the tokenizer's BOS, each reply without it and with the EOS
    (--no-eos: without); HH transcripts cut after their last "Assistant:";
  - bad rows refused by file and line (--on-error fail) or counted (skip);
  - quartet (pairs_probe: tune/pair_dataset.hpp) reads the prepared ids as written, refuses the
    file for another tokenizer or template and an id past the vocabulary, naming the file and
    line; for the built-in tokenizer of random: models, a prepared raw file gives the same ids
    as the plain file quartet tokenizes itself.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prompts_check = load("check_prepared_prompts", os.path.join(HERE, "check_prepared_prompts.py"))
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

passed = 0


def check(cond, what):
    global passed
    if not cond:
        sys.exit(f"check_prepared_pairs: FAILED: {what}")
    passed += 1


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


# Each JSONL row with the prompt messages and replies it must become (None: a raw-only row).
HH_ONE = "\n\nHuman: What is 6 * 12?\n\nAssistant:"
HH_TWO = "\n\nHuman: Hi there\n\nAssistant: Hello! Ask away.\n\nHuman: Sort 3 1 2\n\nAssistant:"
ROWS = [
    ({"prompt": "Sort the digits: 3 1 2", "chosen": "1 2 3", "rejected": "3 2 1", "margin": 1.5, "id": "t0"},
     [user("Sort the digits: 3 1 2")], "1 2 3", "3 2 1"),
    ({"prompt": [{"role": "system", "content": "Answer with a number."}, user("How many clips did Natalia sell?")],
      "chosen": "72", "rejected": [assistant("48")]},
     [{"role": "system", "content": "Answer with a number."}, user("How many clips did Natalia sell?")], "72", "48"),
    ({"chosen": [user("Grüße aus München! 🚀"), assistant("Hallo!")],
      "rejected": [user("Grüße aus München! 🚀"), assistant("Go away.")], "margin": 0},
     [user("Grüße aus München! 🚀")], "Hallo!", "Go away."),
    ({"chosen": HH_ONE + " 72", "rejected": HH_ONE + " 62"}, [user("What is 6 * 12?")], "72", "62"),
    ({"chosen": HH_TWO + " 1 2 3", "rejected": HH_TWO + " I will not."},
     [user("Hi there"), assistant("Hello! Ask away."), user("Sort 3 1 2")], "1 2 3", "I will not."),
]


def write_data(work):
    jsonl = os.path.join(work, "pairs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r[0], ensure_ascii=False) for r in ROWS[:2]) + "\n\n")  # a blank line
        f.write("\n".join(json.dumps(r[0], ensure_ascii=False) for r in ROWS[2:]) + "\n")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("chosen", pa.list_(message)), ("rejected", pa.list_(message)), ("margin", pa.float64()),
                        ("source", pa.string())])
    table = pa.table({
        "chosen": [[user("What is 6 * 12?"), assistant("72")], [user("Sort 9 4 7"), assistant("4 7 9")]],
        "rejected": [[user("What is 6 * 12?"), assistant("612")], [user("Sort 9 4 7"), assistant("9 4 7")]],
        "margin": [None, 2.0],
        "source": ["a", "b"],
    }, schema=schema)
    parquet = os.path.join(work, "pairs.parquet")
    pq.write_table(table, parquet)
    expected = {f"pairs.jsonl:{line}": r[1:] for line, r in zip((1, 2, 4, 5, 6), ROWS)}
    expected["pairs.parquet: row 0"] = ([user("What is 6 * 12?")], "72", "612")
    expected["pairs.parquet: row 1"] = ([user("Sort 9 4 7")], "4 7 9", "9 4 7")
    return jsonl, parquet, expected


def run_prepare(module, *argv):
    return prompts_check.prepare(module, *argv)


def read_file(path):
    return prompts_check.read_prepared(path)


def check_chat(model_dir, header, rows, expected):
    hf = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    check(header["quartet_pairs"] == 1, "header version 1")
    check(header["tokenizer"]["sha256"] == prompts_check.sha256_file(os.path.join(model_dir, "tokenizer.json")),
          "header: the SHA-256 of tokenizer.json")
    ct = header["chat_template"]
    check(ct["applied"] and ct["sha256"] == hashlib.sha256(prompts_check.LLAMA3_TEMPLATE.encode()).hexdigest(),
          f"header: the template applied and its SHA-256: {ct}")
    check(len(rows) == len(expected) and header["rows"] == len(expected), f"{len(expected)} pairs, not {len(rows)}")
    check(header["margins"] == 3, f"three rows with a margin: {header['margins']}")
    for r in rows:
        origin = r["origin"].rsplit("/", 1)[-1]
        prompt, chosen, rejected = expected[origin]
        check(r["messages"] == prompt, f"{origin}: the prompt's messages {r['messages']}")
        want_prompt = hf.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        check(r["prompt_ids"] == want_prompt, f"{origin}: prompt ids {r['prompt_ids']} are {want_prompt}")
        prompt_text = hf.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        check(r["prompt"] == prompt_text, f"{origin}: the prompt's text")
        for side, reply in (("chosen", chosen), ("rejected", rejected)):
            whole = hf.apply_chat_template(prompt + [assistant(reply)], tokenize=True, return_dict=False)
            got = r["prompt_ids"] + r[f"{side}_ids"]
            check(got == whole, f"{origin}: prompt + {side} ids {got} are apply_chat_template's {whole}")
            text = hf.apply_chat_template(prompt + [assistant(reply)], tokenize=False)
            check(r[side] == text[len(prompt_text):], f"{origin}: the {side} response's text {r[side]!r}")
            check(r[f"{side}_ids"][-1] == hf.convert_tokens_to_ids("<|eot_id|>"),
                  f"{origin}: the {side} response ends with the template's end-of-turn token")
    by = {r["origin"].rsplit("/", 1)[-1]: r for r in rows}
    check(by["pairs.jsonl:1"]["margin"] == 1.5 and by["pairs.jsonl:1"]["metadata"] == {"id": "t0"},
          "a margin and the metadata kept")
    check(by["pairs.jsonl:4"]["margin"] == 0 and "margin" not in by["pairs.jsonl:5"], "margin 0 kept, none absent")
    check(by["pairs.parquet: row 1"]["margin"] == 2.0 and "margin" not in by["pairs.parquet: row 0"],
          "Parquet margins (null: none)")
    check(by["pairs.parquet: row 0"]["metadata"] == {"source": "a"}, "Parquet metadata")


def check_raw(module, work, model_dir, jsonl):
    hf = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    eos = hf.eos_token_id
    for extra, tail in (((), [eos]), (("--no-eos",), [])):
        out = os.path.join(work, "raw.jsonl")
        rc, text = run_prepare(module, "--model", model_dir, "--out", out, "--prompt-format", "raw", *extra, jsonl)
        check(rc == 0, f"raw prepare {extra}: {text}")
        header, rows = read_file(out)
        check(header["chat_template"]["applied"], "chat rows still go through the template")
        by = {r["origin"].rsplit("/", 1)[-1]: r for r in rows}
        t = by["pairs.jsonl:1"]
        check(t["prompt_ids"] == hf("Sort the digits: 3 1 2")["input_ids"] and t["prompt_ids"][0] == hf.bos_token_id,
              f"a raw prompt with the tokenizer's BOS {extra}")
        check(t["chosen_ids"] == hf("1 2 3", add_special_tokens=False)["input_ids"] + tail,
              f"a raw reply without the BOS, then {tail} {extra}")
        check("messages" not in t, "a raw row has no messages")
        hh = by["pairs.jsonl:6"]
        check(hh["prompt"] == HH_TWO and hh["chosen"] == " 1 2 3" and hh["rejected"] == " I will not.",
              f"an HH transcript cut after its last Assistant: {hh['prompt']!r} {hh['chosen']!r}")
        check(hh["prompt_ids"] == hf(HH_TWO)["input_ids"] and
              hh["rejected_ids"] == hf(" I will not.", add_special_tokens=False)["input_ids"] + tail,
              f"HH raw ids {extra}")
        check("messages" in by["pairs.jsonl:2"], "an explicit chat prompt still rendered")


def check_refusals(module, work, model_dir):
    bad = os.path.join(work, "bad.jsonl")
    rows = ['{"prompt": "fine", "chosen": "a", "rejected": "b"}',
            '{"prompt": "q", "chosen": "a"}',
            '{"prompt": "q", "chosen": 5, "rejected": "b"}',
            json.dumps({"chosen": [user("x"), assistant("a")], "rejected": [user("y"), assistant("b")]}),
            json.dumps({"prompt": [user("q")], "chosen": [user("a")], "rejected": "b"}),
            '{"chosen": "just text", "rejected": "more text"}',
            '{"prompt": "q", "chosen": "a", "rejected": "b", "margin": "big"}',
            '{"prompt": "q", "chosen": "same", "rejected": "same"}',
            '{"prompt": "' + "long " * 40 + '", "chosen": "a", "rejected": "b"}',
            'not json',
            json.dumps({"prompt": "q", "chosen": [assistant("a")], "rejected": "b"}),
            json.dumps({"chosen": HH_ONE + " 1", "rejected": "\n\nHuman: other\n\nAssistant: 2"})]
    with open(bad, "w") as f:
        f.write("\n".join(rows) + "\n")
    out = os.path.join(work, "bad_prepared.jsonl")
    rc, text = run_prepare(module, "--model", model_dir, "--out", out, "--max-length", "64", bad)
    check(rc == 1 and f"{bad}:2: no 'rejected'" in text and not os.path.exists(out),
          f"--on-error fail stops at the first bad row, naming file and line: {text}")
    rc, text = run_prepare(module, "--model", model_dir, "--out", out, "--max-length", "64", "--on-error", "skip", bad)
    for line, what in [(2, "no 'rejected'"), (3, "'chosen' is an int"), (4, "differ before their last message"),
                       (5, "'chosen' ends with a user message"), (6, "not an HH transcript"),
                       (7, "'margin' is 'big', not a finite number"), (8, "the same response"),
                       (9, "more than --max-length 64"), (10, "not JSON"),
                       (11, "with a string prompt the replies are strings"), (12, "differ before their last")]:
        named = [ln for ln in text.splitlines() if ln.startswith(f"prepare_pairs: skipped {bad}:{line}: ")]
        check(len(named) == 1 and what in named[0], f"skip names {bad}:{line}: {what}: {text}")
    check("skipped 11 of 12 rows" in text and rc == 0, f"skip counts the bad rows: {text}")
    header, kept = read_file(out)
    check(len(kept) == 1 and header["skipped"] == 11, "one row kept")
    rc, text = run_prepare(module, "--model", os.path.join(work, "nowhere"), "--out", out, bad)
    check(rc == 1 and "not a directory" in text, f"a missing model directory: {text}")


def probe(args, path, model, max_tokens=256):
    p = subprocess.run([args.probe, path, model, str(max_tokens)], capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else p.stderr)


def check_quartet_reads(args, work, model_dir, chatml, other, vocab, prepared):
    _, rows = read_file(prepared)
    rc, got = probe(args, prepared, model_dir)
    check(rc == 0 and got["prepared"], f"quartet reads the prepared file: {got}")
    for r, g in zip(rows, got["pairs"]):
        check([g["prompt"], g["chosen"], g["rejected"]] == [r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]],
              f"{r['origin']}: quartet's ids are the file's")
        check(g["margin"] == r.get("margin", 0.0), f"{r['origin']}: the margin {g['margin']}")
    check(len(got["pairs"]) == len(rows), "every pair read")

    rc, err = probe(args, prepared, chatml)
    check(rc == 1 and f"{prepared}:1 says its pairs were rendered with the chat template of {model_dir}/chat_template.jinja"
          in err and f"{chatml}/tokenizer_config.json, is another" in err, f"another template refused: {err}")
    rc, err = probe(args, prepared, other)
    check(rc == 1 and f"{prepared}:1 says its pairs were tokenized with {model_dir}/tokenizer.json" in err and
          "inputs/prepare/prepare_pairs.py --model " + other in err, f"another tokenizer refused: {err}")
    with open(prepared, encoding="utf-8") as f:
        lines = f.read().splitlines()
    row = json.loads(lines[3])
    row["rejected_ids"][0] = vocab + 3
    lines[3] = json.dumps(row)
    past = os.path.join(work, "past_vocab.jsonl")
    with open(past, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    rc, err = probe(args, past, model_dir)
    check(rc == 1 and f"past_vocab.jsonl:4: rejected_ids[0] = {vocab + 3} is outside the tokenizer's vocabulary of {vocab}"
          in err, f"an id past the vocabulary refused: {err}")
    rc, err = probe(args, prepared, model_dir, max_tokens=20)
    check(rc == 1 and f"{prepared}:2: the prompt and the chosen response have" in err and "more than the 20 allowed" in err,
          f"a pair longer than the limit refused: {err}")


def check_builtin(args, work, module):
    """random: models: a prepared raw file gives the ids quartet makes of the plain file."""
    builtin = os.path.join(work, "builtin")
    p = subprocess.run([args.quartet, "tokenize", "random:", "--write-files", builtin], capture_output=True, text=True)
    check(p.returncode == 0, f"quartet tokenize random: --write-files: {p.stderr}")
    plain = os.path.join(work, "sort_pairs.jsonl")
    with open(plain, "w") as f:
        for k, (digits, wrong) in enumerate([("5023", "5032"), ("981", "891"), ("7", "77"), ("4410", "4")]):
            row = {"prompt": f"sort {digits}=", "chosen": "".join(sorted(digits)), "rejected": wrong}
            if k % 2:
                row["margin"] = 0.25 * k
            f.write(json.dumps(row) + "\n")
    prepared = os.path.join(work, "sort_pairs_prepared.jsonl")
    rc, text = run_prepare(module, "--model", builtin, "--out", prepared, plain)
    check(rc == 0 and not read_file(prepared)[0]["chat_template"]["applied"], f"builtin prepare: {text}")
    rc_a, a = probe(args, plain, "builtin")
    rc_b, b = probe(args, prepared, "builtin")
    check(rc_a == 0 and rc_b == 0 and not a["prepared"] and b["prepared"], f"both read: {a} {b}")
    strip = [{k: v for k, v in x.items() if k != "where"} for x in a["pairs"]]
    check(strip == [{k: v for k, v in x.items() if k != "where"} for x in b["pairs"]],
          f"the prepared file's ids are the plain file's: {a['pairs'][0]} {b['pairs'][0]}")
    check(a["pairs"][0]["chosen"][-1] == 2 and a["pairs"][0]["prompt"][0] == 1, "BOS first, EOS last (built-in ids)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--probe", required=True)
    ap.add_argument("--quartet", required=True)
    args = ap.parse_args()
    args.probe, args.quartet = os.path.abspath(args.probe), os.path.abspath(args.quartet)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    model_dir, chatml, other, vocab = prompts_check.make_models(work)
    jsonl, parquet, expected = write_data(work)
    module = load("prepare_pairs", os.path.join(SOURCE, "inputs/prepare/prepare_pairs.py"))
    prepared = os.path.join(work, "prepared.jsonl")
    rc, text = run_prepare(module, "--model", model_dir, "--out", prepared, jsonl, parquet)
    check(rc == 0, f"prepare_pairs: {text}")
    header, rows = read_file(prepared)
    check_chat(model_dir, header, rows, expected)
    check_raw(module, work, model_dir, jsonl)
    check_refusals(module, work, model_dir)
    check_quartet_reads(args, work, model_dir, chatml, other, vocab, prepared)
    check_builtin(args, work, module)
    print(f"check_prepared_pairs: {passed} checks passed")


if __name__ == "__main__":
    main()
