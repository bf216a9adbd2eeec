#!/usr/bin/env python3
"""Sort-digits rows for the pipeline demo (docs/pipeline.md), drawn from a seed.

    python3 inputs/prepare/make_sort_data.py --seed 11 --count 2048 --swap 0.6 --out demos.jsonl
    python3 inputs/prepare/make_sort_data.py --seed 12 --count 2048 --out rl_prompts.jsonl

Each row is {"prompt": "sort 3817=", "answer": "1378"}: 3 to 6 digits, as rule:sort_digits reads
them. --swap makes a sloppy demonstrator: that fraction of the rows whose last two sorted digits
differ get them written the wrong way round ("1387"), a systematic error for SFT to copy and for
RL against the rule to undo. Prompts that --exclude's file holds (the held-out set) are skipped,
so that nothing held out is trained on.
"""

import argparse
import json
import random


def sorted_answer(digits, swap):
    answer = "".join(sorted(digits))
    if swap and answer[-1] != answer[-2]:
        answer = answer[:-2] + answer[-1] + answer[-2]
    return answer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--swap", type=float, default=0.0, help="fraction of answers with the last two digits swapped")
    ap.add_argument("--exclude", default="inputs/prompts/sort_digits_heldout.jsonl")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.count < 0 or not 0.0 <= args.swap <= 1.0:
        ap.error("--count must be >= 0 and --swap in [0, 1]")
    with open(args.exclude) as f:
        held_out = {json.loads(line)["prompt"] for line in f if line.strip()}
    rng = random.Random(args.seed)
    rows = []
    while len(rows) < args.count:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 6)))
        prompt = f"sort {digits}="
        if prompt in held_out:
            continue
        rows.append({"prompt": prompt, "answer": sorted_answer(digits, rng.random() < args.swap)})
    with open(args.out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
