"""A bad prompts or data file ends a job of several ranks at once, with one message naming the
file and line, on every command: the ranks that do not read the file (the critic's and the
reference's in train) must not go on into the collectives that follow the checks.

    python check_bad_data_every_rank.py WORK -- MPIRUN_WORDS... QUARTET

Each run must exit 2 within RUN_SECONDS, print the file with the line (or that it is empty), and
print nothing of a collective gone wrong: no watchdog report (dist.watchdog_timeout is 20 s here,
well past the time a refusal takes), no Open MPI message, no internal error. Cases:
  train (3 ranks: actor, critic, reference), rollout.prompts: rows without the prompt field, an
        empty file, blank lines only (blank lines are skipped), a truncated last line, an answer
        that is a number, one that is null; eval.prompts with a row without the prompt field
  generate (2 ranks), sft (2), rm (2), dpo (3: actor 2, reference 1): a row without its field
"""
import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from watched_run import WatchedRun  # noqa: E402

RUN_SECONDS = 60
# What a collective gone wrong prints: the watchdog's report, Open MPI's complaints, the guard
# against collectives in rank-local steps (dist/rank_local.hpp).
WRONG = re.compile(r"watchdog: rank|unpack|MPI_ERR|internal error|Traceback|terminate called|Segmentation")
GOOD = {"prompt": "sort 206=", "answer": "026"}
PAIR = {"prompt": "sort 206=", "chosen": "026", "rejected": "206"}


def fail(msg):
    sys.exit(f"check_bad_data_every_rank: {msg}")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def rows(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


def bad_prompt_files(work):
    """(case, file, pattern the error must match) for rollout.prompts."""
    good = rows(GOOD, GOOD)
    d = os.path.join(work, "prompts")
    os.makedirs(d)
    cases = [
        ("rows without 'prompt'", write(f"{d}/no_field.jsonl", good + rows({"question": "sort 12="})), r"no_field\.jsonl:3"),
        ("an empty file", write(f"{d}/empty.jsonl", ""), r"empty\.jsonl"),
        ("blank lines only", write(f"{d}/blank.jsonl", "\n\n  \n"), r"blank\.jsonl: holds no prompts"),
        ("a truncated last line", write(f"{d}/truncated.jsonl", good + '{"prompt": "sort 1'), r"truncated\.jsonl:3"),
        ("an answer that is a number", write(f"{d}/answer_number.jsonl", good + rows({"prompt": "sort 21=", "answer": 12})),
         r"answer_number\.jsonl:3"),
        ("an answer that is null", write(f"{d}/answer_null.jsonl", good + rows({"prompt": "sort 21=", "answer": None})),
         r"answer_null\.jsonl:3"),
    ]
    return cases


def expect_refusal(case, cmd, pattern):
    # A run still going after RUN_SECONDS is a hang: WatchedRun kills it and fails the case.
    t0 = time.time()
    run = WatchedRun(cmd, RUN_SECONDS, lambda msg: fail(f"{case}: {msg}"))
    rc, out, took = run.finish(), run.output(), time.time() - t0
    if rc != 2:
        fail(f"{case}: exit {rc}, expected 2:\n{out[-3000:]}")
    if WRONG.search(out):
        fail(f"{case}: the refusal went through a collective gone wrong ({WRONG.search(out).group(0)!r}):\n{out[-3000:]}")
    line = next((ln for ln in out.splitlines() if "error" in ln and re.search(pattern, ln)), None)
    if line is None:
        fail(f"{case}: no error naming {pattern!r}:\n{out[-3000:]}")
    print(f"  {case:45} exit 2 in {took:4.1f} s: {line.strip()[:150]}", flush=True)


def main():
    sep = sys.argv.index("--")
    work = os.path.abspath(sys.argv[1])
    launcher, quartet = sys.argv[sep + 1:-1], sys.argv[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = ["--set", "dist.watchdog_timeout=20"]

    def command(np_, what, deck, *sets):
        cmd = launcher + [str(np_), quartet, what, deck] + common + ["--set", f"run.out={work}/out"]
        for s in sets:
            cmd += ["--set", s]
        return cmd

    for case, path, pattern in bad_prompt_files(work):
        expect_refusal(f"train, rollout.prompts: {case}", command(3, "train", "inputs/demo.deck", f"rollout.prompts={path}"),
                       pattern)
    no_field = os.path.join(work, "prompts", "no_field.jsonl")
    expect_refusal("train, eval.prompts: rows without 'prompt'",
                   command(3, "train", "inputs/demo.deck", f"eval.prompts={no_field}", "eval.every=1"), r"no_field\.jsonl:3")
    expect_refusal("generate: rows without 'prompt'",
                   command(2, "generate", "tests/decks/generate.deck", "model.actor.path=random:llama",
                           f"rollout.prompts={no_field}", "placement.actor=2"),
                   r"no_field\.jsonl:3")
    expect_refusal("sft, sft.data: rows without 'prompt'",
                   command(2, "sft", "inputs/sft/sort_digits.deck", f"sft.data={no_field}"), r"no_field\.jsonl:3")
    pairs = write(os.path.join(work, "pairs.jsonl"), rows(PAIR, PAIR, {"prompt": "sort 12=", "chosen": "12"}))
    expect_refusal("rm, rm.data: a pair without 'rejected'",
                   command(2, "rm", "inputs/rm/sort_digits.deck", f"rm.data={pairs}"), r"pairs\.jsonl:3")
    expect_refusal("dpo, dpo.data: a pair without 'rejected'",
                   command(3, "dpo", "inputs/dpo/sort_digits.deck", f"dpo.data={pairs}"), r"pairs\.jsonl:3")
    print("check_bad_data_every_rank: every bad file ended its job at once, with the file and line")


if __name__ == "__main__":
    main()
